//go:build !linux

package record

import (
	"errors"
	"io"
	"os"
	"time"
)

// Recorder exists only on Linux.
type Recorder struct{}

// Open always fails: the record needs Linux.
func Open(w io.Writer) (*Recorder, error) {
	return nil, errors.New("the activity record needs Linux (seccomp user notification, proc connector)")
}

func (r *Recorder) Write(e *Event)                                {}
func (r *Recorder) Err() error                                    { return nil }
func (r *Recorder) Start(*os.File, int, []string, time.Duration)  {}
func (r *Recorder) Resume(*os.File, int, []string, time.Duration) {}
func (r *Recorder) Sample()                                       {}
func (r *Recorder) Stop()                                         {}
