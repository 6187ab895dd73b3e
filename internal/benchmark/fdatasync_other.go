//go:build !linux

package benchmark

import "os"

func fdatasync(f *os.File) error { return f.Sync() }
