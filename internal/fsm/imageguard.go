//go:build !imagebug

package fsm

// imageGuard keeps image collection off the images of tasks that are not cleaned. A constant,
// so the simulation can prove it finds a build without it (go test -tags imagebug), while no
// production build can switch it off.
const imageGuard = true
