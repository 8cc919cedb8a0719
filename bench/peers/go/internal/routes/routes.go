// Package routes holds the handlers every Go benchmark peer serves, so the
// HTTP/1.1, h2c and TLS servers differ only in transport.
package routes

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

const (
	// MaxEchoSize caps GET /echo?size=N, as in xKit's bench server.
	MaxEchoSize = 16 << 20
	// MaxBodySize caps POST /echo bodies; larger ones get 413.
	MaxBodySize = 64 << 20
	// IdleTimeout matches nginx's keepalive_timeout in bench/peers/nginx.
	IdleTimeout = 75 * time.Second
)

const index = "xKit Go benchmark peer\n" +
	"GET  /ping          -> pong\n" +
	"GET  /echo?size=N   -> N bytes of 'x' (N <= 16 MiB)\n" +
	"POST /echo          -> the request body (<= 64 MiB)\n"

// fill is written repeatedly for /echo?size=N so no response needs its own buffer.
var fill = []byte(strings.Repeat("x", 64<<10))

// NewHandler returns the router shared by all peers. Method-qualified patterns
// make Go answer 405 for a known path with the wrong method, 404 otherwise.
func NewHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", serveIndex)
	mux.HandleFunc("POST /{$}", serveIndex)
	mux.HandleFunc("GET /ping", servePing)
	mux.HandleFunc("GET /echo", serveEchoSize)
	mux.HandleFunc("POST /echo", serveEchoBody)
	return mux
}

// ListenAddress turns the program's single PORT argument into a listen address,
// or exits with a usage line naming the extra arguments the program takes.
func ListenAddress(extraArgs ...string) string {
	if len(os.Args) != 2+len(extraArgs) {
		usage := append([]string{os.Args[0], "PORT"}, extraArgs...)
		fmt.Fprintln(os.Stderr, "usage:", strings.Join(usage, " "))
		os.Exit(2)
	}
	port, err := strconv.ParseUint(os.Args[1], 10, 16)
	if err != nil {
		fmt.Fprintf(os.Stderr, "invalid port %q\n", os.Args[1])
		os.Exit(2)
	}
	return net.JoinHostPort("", strconv.FormatUint(port, 10))
}

func serveIndex(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, index)
}

func servePing(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Content-Length", "4")
	io.WriteString(w, "pong")
}

func serveEchoSize(w http.ResponseWriter, r *http.Request) {
	size, err := strconv.Atoi(r.URL.Query().Get("size"))
	if err != nil || size < 0 || size > MaxEchoSize {
		http.Error(w, "size must be an integer in [0, 16777216]", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Content-Length", strconv.Itoa(size))
	for size > 0 {
		chunk := min(size, len(fill))
		if _, err := w.Write(fill[:chunk]); err != nil {
			return
		}
		size -= chunk
	}
}

func serveEchoBody(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > MaxBodySize {
		http.Error(w, "body over 64 MiB", http.StatusRequestEntityTooLarge)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodySize))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		http.Error(w, "body over 64 MiB", http.StatusRequestEntityTooLarge)
		return
	case err != nil:
		http.Error(w, "could not read body", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body)
}
