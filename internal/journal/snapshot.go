package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
	bolt "go.etcd.io/bbolt"
)

// Snapshots are stored compressed with zstd (issue 25). A snapshot is JSON whose every task
// repeats the same field names, statuses and specs: zstd's fastest level makes it 11 to 23
// times smaller (measured on the lifecycle bench's snapshots: a mid-burst one of 9,688 live
// tasks and 43,634 unsent changes, 14.8 MB, became 0.8 MB). Two snapshots are kept and a third
// is written before the oldest's pages are free, so uncompressed they were most of a busy
// journal's file (48 MB of 10,000 tasks' 157,000 records: 300 bytes a record). Compression
// runs in the caller's goroutine before the commit (packSnapshot), never inside it.
//
// A stored snapshot is told apart by its first bytes: zstd's frame magic, or '{' for one
// stored before compression, which is read as it is. The header's checksum and length are of
// the stored bytes, so damage is found before anything is decompressed.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// maxSnapshotBytes bounds what a stored snapshot may decompress to, so a damaged frame that
// passes its checksum cannot ask for unbounded memory.
const maxSnapshotBytes = 16 << 30

// snapshotEncoderOptions are both encoders' options. A 256 KiB window compresses a snapshot
// as well as the default 4 MiB (a snapshot's repeats are a task apart) and keeps the
// encoder's history, held between snapshots, at a fraction of the default's 8 MB. The block
// is 64 KiB, the fastest level's, and the library offers no option to say so: the level must
// come before the window (a window set first keeps the library's 128 KiB block, which the
// footprint was measured without). TestSnapshotBlocksAre64KiB holds the order.
func snapshotEncoderOptions() []zstd.EOption {
	return []zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithWindowSize(snapshotWindow),
		zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true)}
}

// snapshotWindow is the snapshot encoders' window.
const snapshotWindow = 256 << 10

// The encoder is shared: EncodeAll is safe for concurrent use. A decoder is not: one that
// decoded a snapshot keeps the frame's history, as large as the snapshot (6.3 MB for 20,000
// remembered tasks, 316 bytes a task: the agent restarted held 530 bytes a remembered task
// where the one that remembered them held 337, issue 41), so each snapshot read has its own,
// closed after — reads are rare (recovery, forensics), and a decoder costs little to make.
var snapshotEncoder = sync.OnceValue(func() *zstd.Encoder {
	enc, err := zstd.NewWriter(nil, snapshotEncoderOptions()...)
	if err != nil {
		panic(fmt.Sprintf("journal: zstd encoder: %v", err)) // fixed options: cannot fail
	}
	return enc
})

// packSnapshot is the stored form of a snapshot's bytes.
func packSnapshot(data []byte) []byte {
	return snapshotEncoder().EncodeAll(data, make([]byte, 0, len(data)/8))
}

// PackSnapshot is the stored form of the snapshot write hands over piece by piece (as
// fsm.State.WriteSnapshot does), and the snapshot's own length: each piece is compressed as it
// comes, so the snapshot is never held whole — only its stored form, a tenth to a twentieth
// of it (issue 25). AppendPackedSnapshot stores it. Each snapshot has an encoder of its own:
// one kept between snapshots held its history and tables (0.9 MB, 43 bytes a task of 20,000
// remembered, issue 41) and the stored form it last wrote (0.6 MB), all the time between two
// snapshots, which come at most every 4 records a task or tombstone held.
func PackSnapshot(write func(put func([]byte) error) (int64, error)) ([]byte, int64, error) {
	var out bytes.Buffer
	enc, err := zstd.NewWriter(&out, snapshotEncoderOptions()...)
	if err != nil {
		return nil, 0, fmt.Errorf("journal: zstd encoder: %w", err)
	}
	n, err := write(func(p []byte) error { _, err := enc.Write(p); return err })
	if cerr := enc.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, n, fmt.Errorf("journal: pack snapshot: %w", err)
	}
	return out.Bytes(), n, nil
}

// unpackSnapshot undoes packSnapshot; bytes stored before compression come back as they are.
func unpackSnapshot(stored []byte) ([]byte, error) {
	if !bytes.HasPrefix(stored, zstdMagic) {
		return stored, nil
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxSnapshotBytes))
	if err != nil {
		return nil, fmt.Errorf("journal: zstd decoder: %w", err)
	}
	defer dec.Close()
	data, err := dec.DecodeAll(stored, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: decompress: %w", errSnapshotDamaged, err)
	}
	return data, nil
}

// Snapshots are stored in chunks: key = sequence number (8 bytes) + chunk number (4 bytes).
// Chunk 0 starts with the CRC32C of the whole snapshot and its length. A snapshot of a busy
// host is megabytes; as one value it would need a contiguous run of free pages every time,
// which a file with compacted history rarely has, and the file would grow by a snapshot at
// every snapshot. Chunks are small enough that two fit a 4 KiB page, so a snapshot only ever
// asks for single pages: the pages compaction frees, one here and one there, take every
// snapshot, and the file stops growing under steady churn. (Measured with 32 KiB chunks, 100
// live tasks and 20k records of retention: used bytes grew linearly, 7.6 MB to 14 MB over 1M
// records; with 3 KiB chunks they stayed at 8.9–9.0 MB from 400k records on.)
const snapshotChunk = 2000

func snapshotKey(seq uint64, chunk uint32) []byte {
	return binary.BigEndian.AppendUint32(seqKey(seq), chunk)
}

// putSnapshot writes data, a snapshot as packSnapshot stores it, as the snapshot at seq and
// keeps only the newest keepSnapshots.
func putSnapshot(tx *bolt.Tx, seq uint64, data []byte) error {
	b := tx.Bucket(bucketSnapshots)
	head := binary.BigEndian.AppendUint32(nil, crcOf(data))
	head = binary.BigEndian.AppendUint64(head, uint64(len(data)))
	rest := data
	for i := uint32(0); ; i++ {
		n := min(len(rest), snapshotChunk)
		v := rest[:n]
		if i == 0 {
			v = append(head, v...)
		}
		if err := b.Put(snapshotKey(seq, i), v); err != nil {
			return err
		}
		rest = rest[n:]
		if len(rest) == 0 {
			break
		}
	}
	seqs := snapshotSeqs(tx)
	for len(seqs) > keepSnapshots {
		if err := deleteSnapshot(tx, seqs[0]); err != nil {
			return err
		}
		seqs = seqs[1:]
	}
	return nil
}

func deleteSnapshot(tx *bolt.Tx, seq uint64) error {
	c := tx.Bucket(bucketSnapshots).Cursor()
	prefix := seqKey(seq)
	for k, _ := c.Seek(prefix); k != nil && len(k) == 12 && string(k[:8]) == string(prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// snapshotSeqs lists the stored snapshots' sequence numbers, ascending.
func snapshotSeqs(tx *bolt.Tx) []uint64 {
	var out []uint64
	c := tx.Bucket(bucketSnapshots).Cursor()
	for k, _ := c.First(); k != nil; {
		if len(k) < 8 {
			k, _ = c.Next()
			continue
		}
		seq := binary.BigEndian.Uint64(k)
		out = append(out, seq)
		k, _ = c.Seek(seqKey(seq + 1))
	}
	return out
}

var errSnapshotDamaged = errors.New("snapshot damaged")

// readSnapshot assembles, checks and unpacks the snapshot at seq.
func readSnapshot(tx *bolt.Tx, seq uint64) ([]byte, error) {
	c := tx.Bucket(bucketSnapshots).Cursor()
	prefix := seqKey(seq)
	var data []byte
	var sum uint32
	var size uint64
	i := uint32(0)
	for k, v := c.Seek(prefix); k != nil && string(k[:min(8, len(k))]) == string(prefix); k, v = c.Next() {
		if len(k) != 12 || binary.BigEndian.Uint32(k[8:]) != i {
			return nil, fmt.Errorf("%w: chunk %d missing", errSnapshotDamaged, i)
		}
		if i == 0 {
			if len(v) < 12 {
				return nil, fmt.Errorf("%w: header", errSnapshotDamaged)
			}
			sum, size = binary.BigEndian.Uint32(v), binary.BigEndian.Uint64(v[4:])
			v = v[12:]
			// Sized once (a damaged length is checked below; it only bounds the first guess).
			data = make([]byte, 0, min(size, 256<<20))
		}
		data = append(data, v...)
		i++
	}
	if i == 0 {
		return nil, fmt.Errorf("%w: not found", errSnapshotDamaged)
	}
	if uint64(len(data)) != size || crcOf(data) != sum {
		return nil, fmt.Errorf("%w: %w", errSnapshotDamaged, ErrChecksum)
	}
	return unpackSnapshot(data)
}
