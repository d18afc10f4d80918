package e2b

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"
)

// previewHost names a sandbox's port in a proxied request's URL; the
// transport's dialer reads it back. It never reaches DNS.
const previewHost = ".airlock-preview.invalid"

// previewTransport dials a sandbox's port from outside, into its network
// namespace (manager.DialPort).
func (s *Server) previewTransport() *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			label, ok := strings.CutSuffix(host, previewHost)
			ps, id, ok2 := strings.Cut(label, ".")
			port, err := strconv.Atoi(ps)
			if !ok || !ok2 || err != nil {
				return nil, fmt.Errorf("preview: bad target %q", addr)
			}
			return s.m.DialPort(ctx, id, port)
		},
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 0,
	}
}

// preview proxies a request to a server on 127.0.0.1:port inside the
// sandbox. The caller's credentials for airlock are not passed on.
func (s *Server) preview(w http.ResponseWriter, r *http.Request, id string, port int) {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = strconv.Itoa(port) + "." + id + previewHost
			pr.Out.Host = pr.In.Host
			for _, h := range []string{"X-Access-Token", "E2b-Traffic-Access-Token", "X-Api-Key", "E2b-Sandbox-Id", "E2b-Sandbox-Port"} {
				pr.Out.Header.Del(h)
			}
			if strings.HasPrefix(pr.Out.Header.Get("Authorization"), "Bearer ") && s.keyOK(pr.In.Context(), apiKey(pr.In)) {
				pr.Out.Header.Del("Authorization")
			}
			pr.SetXForwarded()
		},
		Transport: s.proxyTr,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.log.Info("e2b preview: no answer", "sandbox", id, "port", port, "err", err)
			writeErr(w, http.StatusBadGateway, fmt.Sprintf("port %d of sandbox %s is not answering: %v", port, id, err))
		},
	}
	rp.ServeHTTP(w, r)
}
