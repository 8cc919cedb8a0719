// Command arena_server is the Go peer of xKit's HttpArena entry (arena/main.c):
// the same endpoints on the same four ports with Go's standard library alone,
// so `xkbench arena` compares the two under each of the arena's load shapes.
//
//	ARENA_PORTS  "h1+h2c,tls-h1,h2c-only,tls-h2" (default 8080,8081,8082,8443)
//	DATA_DIR     holds dataset.json (default /data)
//	CERTS_DIR    holds server.crt and server.key (default /certs)
//
// GOMAXPROCS in the environment sets its cores. /json is never compressed here:
// the standard library has no Brotli, and the profiles measured ask for neither.
// /static/ sends the .br or .gz twin a file has on disk when Accept-Encoding
// prefers it, read from disk per request; /ws echoes with gorilla/websocket.
package main

import (
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"xkit.dev/bench/go/internal/wsecho"
)

// maxDelay is the longest /delay a client may ask for, as in arena/main.c.
const maxDelay = 60000

// Rating and Item follow the dataset's shape; Total is added per request.
type Rating struct {
	Score int64 `json:"score"`
	Count int64 `json:"count"`
}

type Item struct {
	ID       int64    `json:"id"`
	Name     string   `json:"name"`
	Category string   `json:"category"`
	Price    int64    `json:"price"`
	Quantity int64    `json:"quantity"`
	Active   bool     `json:"active"`
	Tags     []string `json:"tags"`
	Rating   Rating   `json:"rating"`
	Total    int64    `json:"total"`
}

type jsonReply struct {
	Items []Item `json:"items"`
	Count int    `json:"count"`
}

var dataset []Item

// staticDir holds the arena's static files and their twins (DATA_DIR/static).
var staticDir string

// staticTypes are the contract's types; a file of any other kind is a 404.
var staticTypes = map[string]string{
	".css": "text/css", ".js": "application/javascript", ".html": "text/html", ".woff2": "font/woff2",
	".svg": "image/svg+xml", ".webp": "image/webp", ".json": "application/json",
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func sendText(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Content-Length", strconv.Itoa(len(text)))
	w.WriteHeader(status)
	io.WriteString(w, text)
}

// serveBaseline answers the sum of every integer query value, plus the body's
// integer on a POST (Content-Length or chunked: net/http decodes both).
func serveBaseline(w http.ResponseWriter, r *http.Request) {
	var sum int64
	for _, values := range r.URL.Query() {
		for _, v := range values {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				sum += n
			}
		}
	}
	if r.Method == http.MethodPost {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			sendText(w, http.StatusBadRequest, "")
			return
		}
		if n, err := strconv.ParseInt(strings.TrimRight(string(body), "\r\n"), 10, 64); err == nil {
			sum += n
		}
	}
	sendText(w, http.StatusOK, strconv.FormatInt(sum, 10))
}

func servePipeline(w http.ResponseWriter, _ *http.Request) {
	sendText(w, http.StatusOK, "ok")
}

// serveDelay really waits: the goroutine sleeps on a runtime timer.
func serveDelay(w http.ResponseWriter, r *http.Request) {
	ms, err := strconv.Atoi(r.PathValue("ms"))
	if err != nil || ms < 0 || ms > maxDelay {
		sendText(w, http.StatusBadRequest, "ms must be an integer from 0 to 60000\n")
		return
	}
	select {
	case <-time.After(time.Duration(ms) * time.Millisecond):
		sendText(w, http.StatusOK, strconv.Itoa(ms))
	case <-r.Context().Done():
	}
}

// serveJSON serializes the first count items with their totals for this request.
func serveJSON(w http.ResponseWriter, r *http.Request) {
	count, err := strconv.Atoi(r.PathValue("count"))
	m := int64(1)
	if text := r.URL.Query().Get("m"); err == nil && text != "" {
		m, err = strconv.ParseInt(text, 10, 64)
	}
	if err != nil || count < 0 {
		sendText(w, http.StatusBadRequest, "GET /json/{count}?m={m}: integers\n")
		return
	}
	count = min(count, len(dataset))
	reply := jsonReply{Items: make([]Item, count), Count: count}
	for i := range reply.Items {
		reply.Items[i] = dataset[i]
		reply.Items[i].Total = dataset[i].Price * dataset[i].Quantity * m
	}
	body, err := json.Marshal(&reply)
	if err != nil {
		sendText(w, http.StatusInternalServerError, "")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body)
}

func serveEcho(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		sendText(w, http.StatusBadRequest, "")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body)
}

// acceptQ is the q-value Accept-Encoding gives coding (0 when absent; "*" counts).
func acceptQ(header, coding string) float64 {
	q, wildcard := 0.0, 0.0
	for _, part := range strings.Split(header, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		value := 1.0
		if text, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok {
			if v, err := strconv.ParseFloat(text, 64); err == nil {
				value = v
			}
		}
		switch strings.TrimSpace(name) {
		case coding:
			q = value
		case "*":
			wildcard = value
		}
	}
	if q == 0 && !strings.Contains(header, coding) {
		return wildcard
	}
	return q
}

// serveStatic sends a file of DATA_DIR/static, or the twin Accept-Encoding prefers.
func serveStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	kind, known := staticTypes[filepath.Ext(name)]
	if !known || strings.ContainsAny(name, "/\\") || strings.HasPrefix(name, ".") {
		http.NotFound(w, r)
		return
	}
	path, coding := filepath.Join(staticDir, name), ""
	accept := r.Header.Get("Accept-Encoding")
	br, gz := acceptQ(accept, "br"), acceptQ(accept, "gzip")
	for _, twin := range []struct {
		q       float64
		coding  string
		suffix  string
		against float64
	}{{br, "br", ".br", gz}, {gz, "gzip", ".gz", 0}} {
		if twin.q > 0 && twin.q >= twin.against {
			if _, err := os.Stat(path + twin.suffix); err == nil {
				path, coding = path+twin.suffix, twin.coding
				break
			}
		}
	}
	file, err := os.Open(path)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil || !info.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", kind)
	w.Header().Set("Vary", "Accept-Encoding")
	if coding != "" {
		w.Header().Set("Content-Encoding", coding)
	}
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size(), 10))
	io.Copy(w, file)
}

// getSumArgs decodes SumRequest{int32 a = 1; int32 b = 2}: varint fields only.
func getSumArgs(msg []byte) (a, b int32, ok bool) {
	for len(msg) > 0 {
		key, n := binary.Uvarint(msg)
		if n <= 0 || key&7 != 0 {
			return 0, 0, false
		}
		value, m := binary.Uvarint(msg[n:])
		if m <= 0 {
			return 0, 0, false
		}
		msg = msg[n+m:]
		switch key >> 3 {
		case 1:
			a = int32(value)
		case 2:
			b = int32(value)
		}
	}
	return a, b, true
}

// serveGetSum is unary gRPC by hand: one length-prefixed message in, one out,
// grpc-status in the trailers (net/http sends declared trailers after the body).
func serveGetSum(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/grpc")
	w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
	fail := func(status int, why string) {
		w.WriteHeader(http.StatusOK)
		w.Header().Set("Grpc-Status", strconv.Itoa(status))
		w.Header().Set("Grpc-Message", why)
	}
	if r.ProtoMajor != 2 || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
		http.Error(w, "gRPC needs HTTP/2 and content-type application/grpc", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil || len(body) < 5 || body[0] != 0 || int(binary.BigEndian.Uint32(body[1:5])) != len(body)-5 {
		fail(13, "one uncompressed length-prefixed message expected") // INTERNAL
		return
	}
	a, b, ok := getSumArgs(body[5:])
	if !ok {
		fail(3, "SumRequest holds varint fields only") // INVALID_ARGUMENT
		return
	}
	// int32 result = 1, negative values as ten-byte varints as protobuf writes them.
	reply := binary.AppendUvarint([]byte{0x08}, uint64(int64(a+b)))
	frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(reply)))
	w.WriteHeader(http.StatusOK)
	w.Write(append(frame, reply...))
	w.Header().Set("Grpc-Status", "0")
}

func routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /baseline11", serveBaseline)
	mux.HandleFunc("POST /baseline11", serveBaseline)
	mux.HandleFunc("GET /baseline2", serveBaseline)
	mux.HandleFunc("POST /baseline2", serveBaseline)
	mux.HandleFunc("GET /pipeline", servePipeline)
	mux.HandleFunc("GET /delay/{ms}", serveDelay)
	mux.HandleFunc("GET /json/{count}", serveJSON)
	mux.HandleFunc("POST /echo", serveEcho)
	mux.HandleFunc("POST /benchmark.BenchmarkService/GetSum", serveGetSum)
	mux.HandleFunc("GET /static/{file}", serveStatic)
	mux.HandleFunc("GET /ws", wsecho.Handler)
	return mux
}

// protocols is what one listener speaks; the TLS ones offer their ALPN name in tlsFor.
func protocols(http1, http2, h2c bool) *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(http1)
	p.SetHTTP2(http2)
	p.SetUnencryptedHTTP2(h2c)
	return &p
}

func main() {
	ports := strings.Split(envOr("ARENA_PORTS", "8080,8081,8082,8443"), ",")
	if len(ports) != 4 {
		fmt.Fprintln(os.Stderr, "arena_server: ARENA_PORTS must be four ports: h1+h2c,tls-h1,h2c-only,tls-h2")
		os.Exit(2)
	}
	staticDir = filepath.Join(envOr("DATA_DIR", "/data"), "static")
	data, err := os.ReadFile(filepath.Join(envOr("DATA_DIR", "/data"), "dataset.json"))
	if err == nil {
		err = json.Unmarshal(data, &dataset)
	}
	if err != nil {
		log.Fatalf("arena_server: dataset: %v", err)
	}
	certs := envOr("CERTS_DIR", "/certs")
	cert, err := tls.LoadX509KeyPair(filepath.Join(certs, "server.crt"), filepath.Join(certs, "server.key"))
	if err != nil {
		log.Fatalf("arena_server: certificate: %v", err)
	}
	tlsFor := func(alpn string) *tls.Config {
		return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, NextProtos: []string{alpn}}
	}
	handler := routes()
	servers := []*http.Server{
		{Addr: ":" + ports[0], Handler: handler, Protocols: protocols(true, false, true)},
		{Addr: ":" + ports[1], Handler: handler, Protocols: protocols(true, false, false), TLSConfig: tlsFor("http/1.1")},
		{Addr: ":" + ports[2], Handler: handler, Protocols: protocols(false, false, true)},
		{Addr: ":" + ports[3], Handler: handler, Protocols: protocols(false, true, false), TLSConfig: tlsFor("h2")},
	}
	fail := make(chan error, len(servers))
	for _, s := range servers {
		go func() {
			if s.TLSConfig != nil {
				fail <- s.ListenAndServeTLS("", "")
			} else {
				fail <- s.ListenAndServe()
			}
		}()
	}
	// The two lines xkit-arena prints, so the same harness can start either.
	fmt.Printf("listening on 0.0.0.0:%s (%d workers)\n", ports[0], runtime.GOMAXPROCS(0))
	fmt.Printf("and on %s (TLS, http/1.1), %s (h2c only), %s (TLS, h2)\n", ports[1], ports[2], ports[3])
	log.Fatal(<-fail)
}
