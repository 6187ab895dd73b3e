//go:build runtimebug

package runtime

// CheckStart with -tags runtimebug is Docker's own behaviour, the guard removed: a container
// that has run is started again. The simulation and the runtime tests run with this tag must
// find a container run twice; if they do not, they would not see the guard go missing.
func CheckStart(st State) (alreadyRunning bool, err error) { return st.Running, nil }
