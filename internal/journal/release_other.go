//go:build !linux

package journal

// releaseMapped is Linux's madvise (release_linux.go); elsewhere the kernel decides.
func (j *Journal) releaseMapped() {}
