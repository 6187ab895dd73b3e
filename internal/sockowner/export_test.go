package sockowner

// Test hooks: whether lookups go through netlink, and how many of each kind were made.

func SetUseDiag(on bool) (restore func()) {
	old := useDiag
	useDiag = on
	return func() { useDiag = old }
}

func Diags() int64 { return diags.Load() }

func TableReads() int {
	table.mu.Lock()
	defer table.mu.Unlock()
	return table.reads
}

const TableReadEvery = tableReadEvery

// ReadWholeTable reads /proc/net/tcp as the fallback does, for a benchmark beside netlink's.
func ReadWholeTable() error {
	return readTable("/proc/net/tcp", map[string][]*tableQuery{"00000000:0000 00000000:0000": nil})
}

// HolderWalks is how many descriptor-table walks processOf has made.
func HolderWalks() int {
	lastHolder.Lock()
	defer lastHolder.Unlock()
	return lastHolder.walks
}
