// Package errdefs is airlock's one error taxonomy. Every layer wraps one of
// these with the identifying context (`fmt.Errorf("sandbox %q: %w", id,
// errdefs.ErrNotFound)`); the HTTP server maps them to status codes in one
// place, and the SDK maps status codes back.
//
// Error messages repeat a caller's input only through Quote, which caps
// it, and the HTTP server passes every message through Clip, so no input
// can make an error message large.
//
// It holds no behaviour beyond classification and message shaping, and
// must not import anything of airlock's.
package errdefs

import (
	"errors"
	"strconv"
	"time"
	"unicode/utf8"
)

// The kinds of error.
var (
	ErrNotFound     = errors.New("not found")
	ErrExists       = errors.New("already exists")
	ErrInvalid      = errors.New("invalid argument")
	ErrConflict     = errors.New("failed precondition")
	ErrExhausted    = errors.New("resource exhausted")
	ErrTooLarge     = errors.New("too large")
	ErrPermission   = errors.New("permission denied")
	ErrUnavailable  = errors.New("unavailable")
	ErrNotSupported = errors.New("not implemented")
)

// Refinements of ErrInvalid for a command that cannot be started: it does
// not exist (a shell's 127), or it exists but cannot be executed (126).
// errors.Is matches both the refinement and ErrInvalid.
var (
	ErrCommandNotFound = &refined{"command not found", ErrInvalid}
	ErrNotExecutable   = &refined{"command not executable", ErrInvalid}
)

// ErrSandboxEnded refines ErrConflict: the sandbox ended while a call to
// it was on its way (a delete raced it).
var ErrSandboxEnded = &refined{"sandbox ended", ErrConflict}

// refined is a kind that is also a more general one.
type refined struct {
	msg    string
	parent error
}

func (r *refined) Error() string { return r.msg }
func (r *refined) Unwrap() error { return r.parent }

// RetryError is an ErrExhausted (or ErrUnavailable) that says when to try
// again.
type RetryError struct {
	Err   error
	After time.Duration
}

func (e *RetryError) Error() string { return e.Err.Error() }
func (e *RetryError) Unwrap() error { return e.Err }

// RetryAfter returns how long err says to wait, or 0.
func RetryAfter(err error) time.Duration {
	var r *RetryError
	if errors.As(err, &r) {
		return r.After
	}
	return 0
}

// MaxEcho is how many bytes of one input value an error message repeats.
const MaxEcho = 64

// MaxMessage is the longest error message Clip lets through, in bytes.
const MaxMessage = 2048

// Quote returns s quoted as %q does, for an error message that repeats
// input. A value longer than MaxEcho bytes is cut to its first MaxEcho
// bytes (at a character boundary) and followed by its length, e.g.
// "sb-xxxx"... (10000 bytes), so the message still names its start.
func Quote(s string) string {
	if len(s) <= MaxEcho {
		return strconv.Quote(s)
	}
	cut := MaxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "... (" + strconv.Itoa(len(s)) + " bytes)"
}

// Clip caps a whole error message at MaxMessage bytes (at a character
// boundary), saying how much was left out: the backstop for messages
// that repeat input some layer below did not Quote.
func Clip(msg string) string {
	if len(msg) <= MaxMessage {
		return msg
	}
	cut := MaxMessage
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "... (" + strconv.Itoa(len(msg)-cut) + " more bytes left out)"
}
