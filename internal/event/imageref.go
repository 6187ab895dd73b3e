package event

import "github.com/distribution/reference"

// CanonicalImageRef is an image reference in the one spelling the engine resolves it by ("web"
// and "docker.io/library/web:latest" name the same image), so that two spellings of one
// reference compare equal wherever the agent matches references (the core's image
// collection, the runtime's events); a reference that does not parse is compared as written.
// Pure parsing: no registry is asked.
func CanonicalImageRef(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	return reference.TagNameOnly(named).String()
}
