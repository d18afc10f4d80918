// Package errdefs is airlock's one error taxonomy. Every layer wraps one of
// these with the identifying context (`fmt.Errorf("sandbox %q: %w", id,
// errdefs.ErrNotFound)`); the HTTP server maps them to status codes in one
// place, and the SDK maps status codes back.
//
// It holds no behaviour beyond classification and must not import anything
// of airlock's.
package errdefs

import (
	"errors"
	"time"
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
