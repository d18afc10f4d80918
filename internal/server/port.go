package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

// portTunnel upgrades the connection to a raw TCP stream to a port inside
// the sandbox (see the route's comment).
func (s *Server) portTunnel(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	ps := r.PathValue("port")
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return badRequest("port %s: want 1 to 65535", errdefs.Quote(ps))
	}
	if !headerHas(r.Header, "Connection", "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), "tcp") {
		return badRequest("a port tunnel needs Connection: Upgrade and Upgrade: tcp")
	}
	conn, err := s.m.DialPort(r.Context(), id, port)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("port %d of sandbox %s: nothing listens on 127.0.0.1:%d inside: %w", port, id, port, errdefs.ErrUnavailable)
		}
		return err
	}
	defer conn.Close()
	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return fmt.Errorf("port tunnel: %w", err)
	}
	defer nc.Close()
	if sw, ok := w.(*statusWriter); ok {
		sw.status = http.StatusSwitchingProtocols
	}
	nc.SetDeadline(time.Time{})
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
	if err := brw.Flush(); err != nil {
		return nil
	}
	start := time.Now()
	s.log.Info("port tunnel opened", "sandbox", id, "port", port, "remote", r.RemoteAddr)
	up, down := splice(nc, brw.Reader, conn)
	s.log.Info("port tunnel closed", "sandbox", id, "port", port, "remote", r.RemoteAddr, "bytes_up", up, "bytes_down", down,
		"ms", time.Since(start).Milliseconds())
	return nil
}

// closeWriter is a connection whose write half can end alone (TCP, unix
// and TLS connections).
type closeWriter interface{ CloseWrite() error }

// halfCloseGrace bounds how long the client may go on sending once the
// sandbox's side has ended: a server that closed is done with the stream.
const halfCloseGrace = 5 * time.Second

// splice copies client (buffered bytes first, from in) to conn and conn to
// client until both directions end, and returns the bytes each way. An end
// of stream in one direction is passed on as a half-close, so a client that
// sends a request and then ends its side still reads the whole answer; an
// error in either direction, or a connection that cannot half-close, closes
// both.
func splice(client net.Conn, in io.Reader, conn net.Conn) (up, down int64) {
	var once sync.Once
	end := func() { once.Do(func() { client.Close(); conn.Close() }) }
	defer end()
	upc := make(chan int64, 1)
	go func() {
		n, err := io.Copy(conn, in)
		if cw, ok := conn.(closeWriter); err == nil && ok && cw.CloseWrite() == nil {
			upc <- n
			return
		}
		end()
		upc <- n
	}()
	down, err := io.Copy(client, conn)
	if cw, ok := client.(closeWriter); err == nil && ok && cw.CloseWrite() == nil {
		client.SetReadDeadline(time.Now().Add(halfCloseGrace))
	} else {
		end()
	}
	return <-upc, down
}

// headerHas says whether a comma-separated header holds token.
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
