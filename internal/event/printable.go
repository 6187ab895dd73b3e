package event

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Printable shows an identifier from outside (a task ARN, a container name, a message id) so
// that it cannot forge output: as it is when every character is visible and none is a space, a
// quote or a backslash; else Go-quoted, with NUL, newlines, control and invisible characters
// and invalid UTF-8 escaped. Journals written before the ARN rule of PROTOCOL.md 1.1 may hold
// any bytes.
func Printable(s string) string {
	if s == "" {
		return `""`
	}
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return strconv.Quote(s)
			}
		}
		if !unicode.IsGraphic(r) || unicode.IsSpace(r) || r == '"' || r == '\\' || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// PrintableText shows free text (a description, a reason, an error) on one line: spaces are
// kept, every other character that is not visible — newline, NUL, control and format
// characters — and invalid UTF-8 is escaped as in a Go string literal.
func PrintableText(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || (r != ' ' && !unicode.IsPrint(r)) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			const hex = "0123456789abcdef"
			b.WriteString(`\x`)
			b.WriteByte(hex[s[i]>>4])
			b.WriteByte(hex[s[i]&0xf])
		case r == ' ' || unicode.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRune(r) // 'x' with x escaped
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}
