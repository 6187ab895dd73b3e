//go:build startbug && runtimebug

package simulation

import "testing"

// Built with -tags 'startbug runtimebug', starts are not journaled as intents and the runtime
// does not refuse a second start — the agent issue 13 found, which re-ran an exited container
// when the commit holding its start's outcome failed. The simulation must find a container
// started twice within a bounded number of seeds.
func TestSimFindsTheRerunBug(t *testing.T) { findsPlantedBug(t, "RUN TWICE", 300) }
