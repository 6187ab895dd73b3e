//go:build imagebug

package fsm

// imageGuard off: image collection may choose an image a live task uses, planted for the
// simulation to find (make test-sim). Never built without -tags imagebug.
const imageGuard = false
