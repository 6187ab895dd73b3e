package forensics

import "io"

// ReadEntries reads an export as the merge does (readExport), for the tests that read back
// what an export or an OTLP import wrote.
func ReadEntries(r io.Reader) ([]Entry, error) {
	entries, _, err := readExport(r)
	return entries, err
}
