package journal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// A stored snapshot's zstd blocks are at most 64 KiB, the fastest level's block: the library
// has no option naming the block size, and its options set it by their order
// (snapshotEncoderOptions), so this test is what holds it. Both encoders are checked: the
// shared one (packSnapshot) and the streaming one (PackSnapshot). The data is incompressible,
// so every block is stored raw and its size in the frame is its content's.
func TestSnapshotBlocksAre64KiB(t *testing.T) {
	const snapshotBlock = 64 << 10
	data := make([]byte, 300<<10)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	streamed, _, err := PackSnapshot(func(put func([]byte) error) (int64, error) {
		for p := data; len(p) > 0; p = p[min(len(p), 10<<10):] {
			if err := put(p[:min(len(p), 10<<10)]); err != nil {
				return 0, err
			}
		}
		return int64(len(data)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, stored := range map[string][]byte{"packSnapshot": packSnapshot(data), "PackSnapshot": streamed} {
		blocks, err := zstdBlockSizes(stored)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		largest := 0
		for _, b := range blocks {
			largest = max(largest, b)
		}
		if largest != snapshotBlock {
			t.Errorf("%s: largest zstd block %d bytes (blocks %v); want %d", name, largest, blocks, snapshotBlock)
		}
		if back, err := unpackSnapshot(stored); err != nil || !bytes.Equal(back, data) {
			t.Errorf("%s: the stored snapshot does not unpack to what was packed (err %v)", name, err)
		}
	}
}

// zstdBlockSizes is the block sizes of a one-frame zstd stream (RFC 8878 §3.1.1): the content
// size of raw and RLE blocks, the compressed size of compressed ones.
func zstdBlockSizes(frame []byte) ([]int, error) {
	if !bytes.HasPrefix(frame, zstdMagic) || len(frame) < 5 {
		return nil, fmt.Errorf("not a zstd frame")
	}
	fhd := frame[4]
	single := fhd&0x20 != 0
	at := 5
	if !single {
		at++ // window descriptor
	}
	at += []int{0, 1, 2, 4}[fhd&3] // dictionary id
	fcs := []int{0, 2, 4, 8}[fhd>>6]
	if fcs == 0 && single {
		fcs = 1
	}
	at += fcs
	var sizes []int
	for {
		if at+3 > len(frame) {
			return nil, fmt.Errorf("block header at %d past the frame's %d bytes", at, len(frame))
		}
		h := int(binary.LittleEndian.Uint16(frame[at:])) | int(frame[at+2])<<16
		at += 3
		size, kind := h>>3, (h>>1)&3
		sizes = append(sizes, size)
		switch kind {
		case 1: // RLE: one byte repeated size times
			at++
		default:
			at += size
		}
		if h&1 != 0 {
			return sizes, nil
		}
	}
}
