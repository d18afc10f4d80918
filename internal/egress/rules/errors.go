package rules

import (
	"fmt"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

// invalidError is an errdefs.ErrInvalid with a message that names the
// input, without the taxonomy's ": invalid argument" suffix.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() error { return errdefs.ErrInvalid }

func invalidf(format string, args ...any) error {
	return &invalidError{fmt.Sprintf(format, args...)}
}
