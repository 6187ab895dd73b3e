package fsm

// Notes are what the node saw that the caller's logs and metrics tell of — nothing in them
// changes what is journaled or released.

// NoteKind names what a Note tells.
type NoteKind string

const (
	NoteSkipped          NoteKind = "skipped"           // a payload's task that cannot be recorded: Subject the message, Detail the problem
	NotePayloadJournaled NoteKind = "payload journaled" // Subject the message id
	NotePayloadDuplicate NoteKind = "payload duplicate" // the journal holds it already
	NoteFailedStopped    NoteKind = "failed stopped"    // a call failed and its container is recorded STOPPED: Subject the call, Detail the error
	NoteStranger         NoteKind = "stranger"          // a container of this agent the journal does not know: Subject task/container, Detail its id
	NoteImageRemoved     NoteKind = "image removed"     // Subject the image id
	NoteImageReleased    NoteKind = "image released"    // someone else holds it too: Detail says how
	NoteImageNotRemoved  NoteKind = "image not removed" // Detail the error; the next cycle may try again
	NoteDiskLow          NoteKind = "disk low"          // the runtime's disk is low: images go regardless of age
	NoteDiskUnread       NoteKind = "disk unread"       // the disk question failed: collecting by age only
)

// Note is one thing the node saw, for the caller's log and metrics.
type Note struct {
	Kind    NoteKind
	Subject string
	Detail  string
}
