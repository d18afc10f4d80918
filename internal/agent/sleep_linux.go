package agent

import (
	"encoding/json"
	"io"
	"os"
	"strconv"
)

// SleepState is what an agent carries across a sleep (Server.Sleep): the
// largest process id it has seen and the output it keeps of finished
// processes, which readers may still ask for.
type SleepState struct {
	MaxID    uint64        `json:"max_id"`
	Finished []SleptOutput `json:"finished,omitempty"` // oldest first
}

// SleptOutput is a finished process's kept output.
type SleptOutput struct {
	ID      uint64         `json:"id"`
	Streams [2]SleptStream `json:"streams"` // stdout, stderr
}

// SleptStream is one stream's kept bytes, from offset Start to End.
type SleptStream struct {
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
	Cap   int    `json:"cap"`
	Data  []byte `json:"data"`
}

// File returns a memfd holding st, positioned at its start, for the
// agent executed again (ReadSleepState).
func (st *SleepState) File() (*os.File, error) {
	raw, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	return spillFile(raw)
}

// ReadSleepState reads what File wrote.
func ReadSleepState(f *os.File) (*SleepState, error) {
	raw, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	var st SleepState
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// procRoot is where idleState lists the sandbox's processes.
var procRoot = "/proc"

// sleepCarryMax bounds the kept output an agent carries across a sleep:
// carrying it copies it (into the state, then its memfd) while the agent
// still holds it, in the sandbox's memory, and sleeping saves about 1 MiB.
// An agent that keeps more stays awake.
var sleepCarryMax = 1 << 20

// sleep answers a TypeSleep and, when the sandbox is idle, calls Sleep,
// which returns only if the agent could not sleep after all.
func (s *Server) sleep(conn *Conn, seq uint64) {
	st, why := s.idleState()
	if why != "" {
		s.send(&Message{Type: TypeAck, Ack: &Ack{Seq: seq, Error: why}})
		return
	}
	// Answered first: a request sent meanwhile wakes the sleeper at once.
	// A failure leaves the supervisor believing the agent sleeps; it is
	// awake and serves the next request just the same.
	s.send(&Message{Type: TypeAck, Ack: &Ack{Seq: seq}})
	s.Sleep(conn, st)
}

// idleState returns what the agent would carry across a sleep, or why it
// cannot sleep now: something runs in the sandbox (a process other than
// this one in its PID namespace, or output still open: a process it left
// holds the pipe), or a request is in progress.
func (s *Server) idleState() (*SleepState, string) {
	if s.Sleep == nil {
		return nil, "this agent cannot sleep"
	}
	if s.busy.Load() > 0 {
		return nil, "busy: a request is in progress"
	}
	s.sendM.Lock()
	pending := len(s.pending)
	s.sendM.Unlock()
	if pending > 0 {
		return nil, "busy: exits not delivered yet"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.procs)+len(s.pids) > 0 {
		return nil, "busy: processes run"
	}
	st := &SleepState{MaxID: s.maxID}
	kept := 0
	for _, bufs := range s.outputs {
		for _, b := range bufs {
			b.mu.Lock()
			kept += int(b.end - b.start)
			b.mu.Unlock()
		}
	}
	if kept > sleepCarryMax {
		return nil, "busy: keeps more output than a sleep carries (" + strconv.Itoa(kept) + " bytes)"
	}
	for _, id := range s.finished {
		bufs, ok := s.outputs[id]
		if !ok {
			continue
		}
		o := SleptOutput{ID: id}
		// Holds do not matter once a stream has ended (they only stop
		// its pump): its bytes are all carried.
		for i, b := range bufs {
			b.mu.Lock()
			ended := b.eof
			if ended {
				o.Streams[i] = SleptStream{Start: b.start, End: b.end, Cap: b.cap}
				o.Streams[i].Data = b.bytesLocked()
			}
			b.mu.Unlock()
			if !ended {
				return nil, "busy: output of a process is still open"
			}
		}
		st.Finished = append(st.Finished, o)
	}
	if len(st.Finished) != len(s.outputs) {
		return nil, "busy: output of a running process"
	}
	d, err := os.Open(procRoot)
	if err != nil {
		return nil, "cannot list processes: " + err.Error()
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, "cannot list processes: " + err.Error()
	}
	self := strconv.Itoa(os.Getpid())
	for _, name := range names {
		if name != self && name[0] >= '0' && name[0] <= '9' {
			return nil, "busy: process " + name + " runs in the sandbox"
		}
	}
	return st, ""
}

// Resume restores what an agent carried across a sleep, before Serve.
func (s *Server) Resume(st *SleepState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxID = max(s.maxID, st.MaxID)
	for _, o := range st.Finished {
		var bufs [2]*outputBuffer
		for i, ss := range o.Streams {
			bufs[i] = restoredBuffer(ss)
		}
		s.outputs[o.ID] = bufs
		s.finished = append(s.finished, o.ID)
	}
}

// bytesLocked returns the kept bytes, oldest first. The caller holds b.mu.
func (b *outputBuffer) bytesLocked() []byte {
	out := make([]byte, b.end-b.start)
	if len(out) > 0 {
		i := int(b.start % uint64(b.cap))
		k := copy(out, b.ring[i:])
		copy(out[k:], b.ring)
	}
	return out
}

// restoredBuffer is an ended stream holding ss's bytes at their offsets.
func restoredBuffer(ss SleptStream) *outputBuffer {
	b := newOutputBuffer(max(ss.Cap, 1))
	n := uint64(len(ss.Data))
	if ss.End < n || ss.End-n != ss.Start || n > uint64(b.cap) {
		// Not what idleState wrote: keep nothing rather than wrong bytes.
		ss.Start, ss.Data = ss.End, nil
		n = 0
	}
	if ss.End <= uint64(b.cap) {
		// Never wrapped: offsets are indices (the bytes before Start,
		// none then, stay zero).
		b.ring = make([]byte, ss.End)
		copy(b.ring[ss.Start:], ss.Data)
	} else {
		b.ring = make([]byte, b.cap)
		for k := uint64(0); k < n; k++ {
			b.ring[(ss.Start+k)%uint64(b.cap)] = ss.Data[k]
		}
	}
	b.start, b.end = ss.Start, ss.End
	b.close()
	return b
}
