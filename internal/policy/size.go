package policy

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// sizeUnits maps lower-cased unit suffixes to their multipliers. K, M, G,
// T and P without "B" are binary, like KiB; KB, MB, ... are decimal.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "ki": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mi": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gi": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "ti": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	"p": 1 << 50, "pi": 1 << 50, "pib": 1 << 50, "pb": 1e15,
}

const sizeUnitList = "B, K, KB, KiB, M, MB, MiB, G, GB, GiB, T, TB, TiB, P, PB, PiB"

// ParseSize parses a size in bytes: an integer, optionally with a fraction
// and a unit ("512MiB", "1.5G", "100 KB", "4096"). K, M, G, T and P are
// binary (K = KiB = 1024), KB, MB, GB, TB and PB are decimal (KB = 1000).
// Units are case-insensitive. Fractional byte counts are rounded down.
// Negative sizes and sizes above MaxSize (1PiB) are errors.
//
// Errors read `invalid size "12XB": unknown unit "XB" (use ...)`.
func ParseSize(s string) (int64, error) {
	bad := func(format string, args ...any) (int64, error) {
		return 0, fmt.Errorf("invalid size %q: %s", s, fmt.Sprintf(format, args...))
	}
	t := strings.TrimSpace(s)
	if t == "" {
		return bad("empty")
	}
	if len(t) > 64 {
		return bad("too long")
	}
	if t[0] == '-' {
		return bad("must not be negative")
	}
	i := 0
	dots := 0
	for i < len(t) && (isDigit(t[i]) || t[i] == '.') {
		if t[i] == '.' {
			dots++
		}
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if num == "" || !isDigit(num[0]) || !isDigit(num[len(num)-1]) || dots > 1 {
		return bad("want a number of bytes, optionally followed by a unit (%s)", sizeUnitList)
	}
	mult, ok := sizeUnits[strings.ToLower(unit)]
	if !ok {
		return bad("unknown unit %q (use %s)", unit, sizeUnitList)
	}
	if dots == 0 {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n > MaxSize/mult {
			return bad("larger than the 1PiB limit")
		}
		return n * mult, nil
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return bad("want a number of bytes, optionally followed by a unit (%s)", sizeUnitList)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if r.Cmp(new(big.Rat).SetInt64(MaxSize)) > 0 {
		return bad("larger than the 1PiB limit")
	}
	n := new(big.Int).Quo(r.Num(), r.Denom()) // r >= 0: truncation is floor
	return n.Int64(), nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// FormatSize formats n bytes in the largest binary unit that divides it
// exactly ("512MiB", "1GiB", "1000B" -> "1000"); it is the inverse of
// ParseSize for non-negative n.
func FormatSize(n int64) string {
	units := []struct {
		s string
		m int64
	}{{"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}
	if n > 0 {
		for _, u := range units {
			if n%u.m == 0 {
				return strconv.FormatInt(n/u.m, 10) + u.s
			}
		}
	}
	return strconv.FormatInt(n, 10)
}
