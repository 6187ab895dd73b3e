package protocol

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ValidateARN checks the ARN rule of PROTOCOL.md §1: 1 to MaxARNLength bytes of printable
// UTF-8 without whitespace or control characters. A task whose ARN breaks it is treated like
// one without an ARN. The rule keeps ARNs usable as journal keys, log fields and report
// fields, and printable wherever forensics shows them.
func ValidateARN(arn string) error {
	switch {
	case arn == "":
		return fmt.Errorf("arn: missing")
	case len(arn) > MaxARNLength:
		return fmt.Errorf("arn: %d bytes, at most %d", len(arn), MaxARNLength)
	case !utf8.ValidString(arn):
		return fmt.Errorf("arn: %s is not UTF-8", Quote(arn))
	}
	for _, r := range arn {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("arn: %s holds whitespace or a control character (%U)", Quote(arn), r)
		}
	}
	return nil
}

// validateEnvName checks an environment variable's name: non-empty, without "=" (which would
// let "PATH=/evil:" reach the runtime as PATH) or NUL.
func validateEnvName(k string) error {
	switch {
	case k == "":
		return fmt.Errorf("empty variable name")
	case strings.ContainsAny(k, "=\x00"):
		return fmt.Errorf("variable name %s holds \"=\" or NUL", Quote(k))
	}
	return nil
}

// quoteMax is how much of a value an error message quotes.
const quoteMax = 64

// Quote quotes a value for an error message: Go-escaped (control characters, NUL and invalid
// UTF-8 never appear raw) and cut to its first 64 bytes with its full length, so a 3.5 MB
// hostile value makes a short reason.
func Quote(s string) string {
	if len(s) <= quoteMax {
		return strconv.Quote(s)
	}
	cut := quoteMax
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:cut]), len(s))
}

// ShortenReason cuts a reason to at most MaxReasonBytes (PROTOCOL.md §3), at a character
// boundary, marking the cut.
func ShortenReason(s string) string {
	if len(s) <= MaxReasonBytes {
		return s
	}
	const mark = "… (shortened)"
	cut := MaxReasonBytes - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.ToValidUTF8(s[:cut], "") + mark
}
