// goupstream is Go's net/http server as an upstream behind xKit's reverse
// proxy (tests/integration/test_proxy_conformance.py): it listens on a free
// loopback port, prints the port on a line, and serves until killed.
//
//	/echo       the request body back, with X-Method (Content-Length set by Go)
//	/chunked/N  N bytes in flushed pieces (chunked) with an X-Sum trailer
//	/none       204, no body
//	otherwise   JSON: method, path, the fields received and the body's length
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
)

func chunked(w http.ResponseWriter, n int) {
	w.Header().Set("Trailer", "X-Sum")
	sum := sha256.New()
	piece := []byte(strings.Repeat("0123456789abcdef", 4096))
	for n > 0 {
		k := len(piece)
		if k > n {
			k = n
		}
		w.Write(piece[:k])
		sum.Write(piece[:k])
		w.(http.Flusher).Flush()
		n -= k
	}
	w.Header().Set("X-Sum", hex.EncodeToString(sum.Sum(nil)))
}

func handle(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasSuffix(r.URL.Path, "/echo"):
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Method", r.Method)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	case strings.HasPrefix(r.URL.Path, "/chunked/"):
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/chunked/"))
		chunked(w, n)
	case r.URL.Path == "/none":
		w.WriteHeader(http.StatusNoContent)
	default:
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"method": r.Method, "path": r.URL.RequestURI(), "fields": r.Header, "body_len": len(body),
			"proto": r.Proto,
		})
	}
}

func main() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(l.Addr().(*net.TCPAddr).Port)
	http.Serve(l, http.HandlerFunc(handle))
}
