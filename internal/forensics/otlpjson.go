package forensics

// Reading an OTLP/JSON line one value at a time: whatever a line holds (the Collector writes a
// whole request a line, and a hostile file may hold millions of records in one), the reader
// never holds more than one JSON value of at most MaxOTLPRecord bytes, and names the line and
// record of a value over that bound before it is read whole.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// MaxOTLPRecord bounds the JSON of one log record (and of one resource, or any value the
// import skips): agentd's shipper never sends a record that does not fit its 1 MiB batch
// (PROTOCOL.md §5), so a bigger one is not agentd's.
const MaxOTLPRecord = 1 << 20

// errOverBound is a JSON value that needs more than MaxOTLPRecord bytes; errRefused is that
// value named (refuse).
var (
	errOverBound = errors.New("over the bound")
	errRefused   = errors.New("refused")
)

// lineReader reads one line of br, its newline included, then io.EOF.
type lineReader struct {
	br    *bufio.Reader
	ended bool
}

func (l *lineReader) Read(p []byte) (int, error) {
	if l.ended || len(p) == 0 {
		return 0, io.EOF
	}
	if _, err := l.br.Peek(1); err != nil {
		l.ended = true
		return 0, err
	}
	data, _ := l.br.Peek(min(len(p), l.br.Buffered()))
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		data, l.ended = data[:i+1], true
	}
	n := copy(p, data)
	_, _ = l.br.Discard(n)
	return n, nil
}

// budgetReader reads no further than limit: a value that needs more is over the bound.
type budgetReader struct {
	r           io.Reader
	read, limit int64
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.read >= b.limit {
		return 0, errOverBound
	}
	p = p[:min(int64(len(p)), b.limit-b.read)]
	n, err := b.r.Read(p)
	b.read += int64(n)
	return n, err
}

// jsonLine walks one line's JSON value by value, each value read within the bound.
type jsonLine struct {
	n       int // the line's number, from 1
	in      *budgetReader
	dec     *json.Decoder
	started bool // a token was read: the line is not blank
}

func newJSONLine(n int, br *bufio.Reader) *jsonLine {
	in := &budgetReader{r: &lineReader{br: br}}
	return &jsonLine{n: n, in: in, dec: json.NewDecoder(in)}
}

// allow lets the decoder read one value of at most MaxOTLPRecord bytes from where it stands
// (plus a read's worth of look-ahead).
func (l *jsonLine) allow() { l.in.limit = l.dec.InputOffset() + MaxOTLPRecord + 4096 }

func (l *jsonLine) token() (json.Token, error) {
	l.allow()
	tok, err := l.dec.Token()
	l.started = l.started || err == nil
	return tok, err
}

// refuse names a value over the bound by its line and where on the line it was.
func (l *jsonLine) refuse(where string) error {
	return fmt.Errorf("line %d, %s: more than %d MiB in one JSON value, the bound on one log record (agentd's shipper sends none bigger): %w",
		l.n, where, MaxOTLPRecord>>20, errRefused)
}

// value reads the next value whole.
func (l *jsonLine) value() (json.RawMessage, error) {
	l.allow()
	var raw json.RawMessage
	if err := l.dec.Decode(&raw); err != nil {
		return nil, err
	}
	if len(raw) > MaxOTLPRecord {
		return nil, errOverBound
	}
	return raw, nil
}

// object calls field for each key of the object that comes next; a null is an empty object.
func (l *jsonLine) object(what string, field func(key string) error) error {
	return l.members(what, '{', func() error {
		key, err := l.token()
		if err != nil {
			return err
		}
		return field(key.(string))
	})
}

// array calls elem for each element of the array that comes next; a null is an empty array.
func (l *jsonLine) array(what string, elem func() error) error {
	return l.members(what, '[', elem)
}

// members reads the value that comes next, which opens with open (or is null), calling next
// for each of its members.
func (l *jsonLine) members(what string, open json.Delim, next func() error) error {
	tok, err := l.token()
	if err != nil || tok == nil {
		return err
	}
	if tok != open {
		return fmt.Errorf("%s: want %s, not %v", what, map[json.Delim]string{'{': "an object", '[': "an array"}[open], tok)
	}
	for l.dec.More() {
		if err := next(); err != nil {
			return err
		}
	}
	_, err = l.token()
	return err
}

// skip passes over the next value token by token, so nothing it nests is held; the whole
// value is read within the bound (the decoder keeps a frame for each level it nests: a line of
// nothing but '[' held 26 times its size).
func (l *jsonLine) skip() error {
	l.allow()
	depth := 0
	for {
		tok, err := l.dec.Token()
		if err != nil {
			return err
		}
		l.started = true
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// end checks that nothing but white space follows the line's value.
func (l *jsonLine) end() error {
	if _, err := l.token(); err != io.EOF {
		return fmt.Errorf("line %d: not OTLP/JSON logs: more than one JSON value on the line", l.n)
	}
	return nil
}
