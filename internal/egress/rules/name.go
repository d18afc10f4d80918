package rules

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on domain names (RFC 1035), in ASCII form without the trailing dot.
const (
	maxName  = 253
	maxLabel = 63
	// maxInput bounds the work done on a host or rule before it is
	// rejected; no valid name comes near it.
	maxInput = 1024
)

// toASCII maps s to the ASCII form of a domain name, the way browsers look
// names up (a subset of UTS #46 and IDNA2008, without Unicode tables beyond
// the standard library's): it lowercases, maps full-width ASCII and the
// ideographic full stops (。．｡) to ASCII, converts Unicode labels to
// punycode ("xn--"), checks that "xn--" labels are the canonical encoding
// of such a label, and strips one trailing dot. Unicode labels may hold
// only letters and combining marks (no symbols, spaces, invisible
// formatting or non-ASCII digits) and may not start with a mark. Input that
// needs Unicode normalisation (NFC, NFKC) is not normalised: it maps to
// another DNS name than a browser would look up, which is safe, since the
// gateway checks and resolves the same name, but may fail to match a rule.
// The ASCII labels themselves are checked by checkName.
func toASCII(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("not valid UTF-8")
	}
	s = strings.Map(mapRune, s)
	s = strings.TrimSuffix(s, ".")
	labels := strings.Split(s, ".")
	for i, label := range labels {
		var err error
		if labels[i], err = labelToASCII(label); err != nil {
			return "", err
		}
	}
	return strings.Join(labels, "."), nil
}

// mapRune lowercases r and maps full-width ASCII and full stops to ASCII.
func mapRune(r rune) rune {
	switch {
	case r == '\u3002' || r == '\uff0e' || r == '\uff61':
		return '.'
	case '\uff01' <= r && r <= '\uff5e':
		r -= 0xfee0
	}
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		return r
	}
	return unicode.ToLower(r)
}

func labelToASCII(label string) (string, error) {
	if !isASCII(label) {
		runes := []rune(label)
		if err := checkULabel(runes); err != nil {
			return "", err
		}
		p, err := punyEncode(runes)
		if err != nil {
			return "", fmt.Errorf("label %q: %v", label, err)
		}
		return "xn--" + p, nil
	}
	if !strings.HasPrefix(label, "xn--") {
		return label, nil
	}
	runes, err := punyDecode(label[4:])
	if err != nil {
		return "", fmt.Errorf("label %q is not valid punycode: %v", label, err)
	}
	if isASCII(string(runes)) {
		return "", fmt.Errorf("label %q is punycode for the ASCII label %q; write that", label, string(runes))
	}
	if err := checkULabel(runes); err != nil {
		return "", fmt.Errorf("label %q: %v", label, err)
	}
	if p, err := punyEncode(runes); err != nil || "xn--"+p != label {
		return "", fmt.Errorf("label %q is not the canonical punycode for %q", label, string(runes))
	}
	return label, nil
}

// checkULabel reports what keeps runes, a label that is not all ASCII,
// from being a label in the form toASCII maps to, or nil.
func checkULabel(runes []rune) error {
	if strings.HasPrefix(string(runes), "xn--") {
		return fmt.Errorf("label %q starts with xn-- but is not ASCII", string(runes))
	}
	for i, r := range runes {
		switch {
		case r < utf8.RuneSelf:
			// ASCII bytes are checked in the ASCII form by checkName.
		case i == 0 && unicode.IsMark(r):
			return fmt.Errorf("label %q starts with a combining mark", string(runes))
		case !unicode.IsLetter(r) && !unicode.IsMark(r):
			return fmt.Errorf("label %q contains %q (%U); only letters and combining marks may be non-ASCII", string(runes), r, r)
		case mapRune(r) != r:
			return fmt.Errorf("label %q contains %q (%U), which is not lowercase", string(runes), r, r)
		}
	}
	return nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// checkName reports what is wrong with an ASCII domain name (as returned
// by toASCII), or nil.
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("empty name")
	}
	if len(name) > maxName {
		return fmt.Errorf("name is %d characters long; the limit is %d", len(name), maxName)
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" {
			return fmt.Errorf("empty label (two dots in a row, or a leading dot)")
		}
		if len(label) > maxLabel {
			return fmt.Errorf("label %q is %d characters long; the limit is %d", label, len(label), maxLabel)
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !isLabelByte(c) {
				return fmt.Errorf("label %q contains %q; only letters, digits, '-' and '_' are allowed", label, c)
			}
		}
	}
	return nil
}

func isLabelByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// endsInNumber reports whether name's last label is a number (decimal
// digits, or 0x and hex digits, however large), which makes it an IPv4
// address or an invalid host rather than a domain name, as in the WHATWG
// URL standard: "127.1", "0x7f.1", "example.123", "0x100000000".
func endsInNumber(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if last == "" {
		return false
	}
	digits := "0123456789"
	if len(last) >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') {
		last, digits = last[2:], "0123456789abcdefABCDEF"
	}
	for i := 0; i < len(last); i++ {
		if strings.IndexByte(digits, last[i]) < 0 {
			return false
		}
	}
	return true
}
