// Command ws_load is the WebSocket load generator of xKit's benchmarks and a
// gorilla/websocket client for its tests: it keeps -conns connections with
// -inflight messages in flight on each, checks every echo against what was
// sent (in order), and can re-upgrade (a new connection and handshake)
// after every -reupgrade messages. With -raw, after gorilla's handshake it
// writes prebuilt masked "hello" frames itself, all that are due in one
// write, and reads the echoes frame by frame: a cheaper client that sends
// K messages in flight as one batch, as a pipelining client would. It
// prints "messages=N seconds=S rate=R errors=E" and exits 1 on any error.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

func main() {
	url := flag.String("url", "ws://127.0.0.1:8080/ws", "the echo endpoint")
	conns := flag.Int("conns", 512, "connections kept open")
	inflight := flag.Int("inflight", 1, "messages in flight per connection")
	duration := flag.Duration("duration", 5*time.Second, "how long to run")
	size := flag.Int("size", 0, "message size; 0 sends \"hello\"")
	reupgrade := flag.Int("reupgrade", 0, "messages per connection before a new handshake (0: never)")
	compress := flag.Bool("compress", false, "offer permessage-deflate")
	raw := flag.Bool("raw", false, "write prebuilt \"hello\" frames in batches (no -size, no -compress)")
	flag.Parse()
	if *raw && (*size != 0 || *compress) {
		fmt.Fprintln(os.Stderr, "-raw sends \"hello\" uncompressed only")
		os.Exit(2)
	}

	var messages, errors atomic.Int64
	deadline := time.Now().Add(*duration)
	dialer := websocket.Dialer{EnableCompression: *compress, HandshakeTimeout: 10 * time.Second}
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < *conns; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			work := run
			if *raw {
				work = runRaw
			}
			if err := work(&dialer, *url, c, *inflight, *size, *reupgrade, deadline, &messages); err != nil {
				fmt.Fprintf(os.Stderr, "connection %d: %v\n", c, err)
				errors.Add(1)
			}
		}(c)
	}
	wg.Wait()
	seconds := time.Since(start).Seconds()
	fmt.Printf("messages=%d seconds=%.3f rate=%.0f errors=%d\n", messages.Load(), seconds,
		float64(messages.Load())/seconds, errors.Load())
	if errors.Load() > 0 {
		os.Exit(1)
	}
}

// message is the seq-th message of connection c.
func message(c, seq, size int) []byte {
	if size == 0 {
		return []byte("hello")
	}
	head := []byte(strconv.Itoa(c) + ":" + strconv.Itoa(seq) + ":")
	out := bytes.Repeat([]byte{'x'}, size)
	copy(out, head)
	return out
}

// run keeps one client busy until deadline, re-upgrading as asked.
func run(dialer *websocket.Dialer, url string, c, inflight, size, reupgrade int, deadline time.Time,
	messages *atomic.Int64) error {
	seq := 0
	for time.Now().Before(deadline) {
		ws, _, err := dialer.Dial(url, nil)
		if err != nil {
			return err
		}
		var sent [][]byte
		send := func() error {
			m := message(c, seq, size)
			seq++
			sent = append(sent, m)
			return ws.WriteMessage(websocket.TextMessage, m)
		}
		done := 0
		for len(sent) < inflight && (reupgrade == 0 || len(sent) < reupgrade) {
			if err := send(); err != nil {
				return err
			}
		}
		for len(sent) > done {
			kind, got, err := ws.ReadMessage()
			if err != nil {
				return err
			}
			if kind != websocket.TextMessage || !bytes.Equal(got, sent[done]) {
				return fmt.Errorf("echo %d differs: %q", done, got)
			}
			sent[done] = nil
			done++
			messages.Add(1)
			if time.Now().Before(deadline) && (reupgrade == 0 || len(sent) < reupgrade) {
				if err := send(); err != nil {
					return err
				}
			}
			if reupgrade == 0 && done > 1024 {
				sent, done = sent[done:], 0
			}
		}
		ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		ws.Close()
	}
	return nil
}

// helloFrame is "hello" as a client sends it: FIN, text, masked with a fixed key.
var helloFrame = func() []byte {
	key := []byte{0x12, 0x34, 0x56, 0x78}
	f := []byte{0x81, 0x80 | 5, key[0], key[1], key[2], key[3]}
	for i, b := range []byte("hello") {
		f = append(f, b^key[i%4])
	}
	return f
}()

// helloEcho is the server's unmasked answer.
var helloEcho = []byte{0x81, 5, 'h', 'e', 'l', 'l', 'o'}

// runRaw is run with frames written and read by hand after the handshake.
func runRaw(dialer *websocket.Dialer, url string, c, inflight, size, reupgrade int, deadline time.Time,
	messages *atomic.Int64) error {
	batch := bytes.Repeat(helloFrame, inflight)
	buf := make([]byte, 64<<10)
	for time.Now().Before(deadline) {
		ws, _, err := dialer.Dial(url, nil)
		if err != nil {
			return err
		}
		conn := ws.NetConn()
		limit := reupgrade
		if limit == 0 {
			limit = int(^uint(0) >> 1)
		}
		due := min(inflight, limit)
		sent, got, have := due, 0, 0
		if _, err := conn.Write(batch[:due*len(helloFrame)]); err != nil {
			return err
		}
		for got < sent {
			n, err := conn.Read(buf[have:])
			if err != nil {
				return err
			}
			have += n
			echoes := 0
			for have-echoes*len(helloEcho) >= len(helloEcho) {
				at := echoes * len(helloEcho)
				if !bytes.Equal(buf[at:at+len(helloEcho)], helloEcho) {
					return fmt.Errorf("echo %d differs: %q", got+echoes, buf[at:at+len(helloEcho)])
				}
				echoes++
			}
			rest := have - echoes*len(helloEcho)
			copy(buf, buf[have-rest:have])
			have = rest
			got += echoes
			messages.Add(int64(echoes))
			more := min(echoes, limit-sent)
			if more > 0 && time.Now().Before(deadline) {
				if _, err := conn.Write(batch[:more*len(helloFrame)]); err != nil {
					return err
				}
				sent += more
			}
		}
		ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		ws.Close()
	}
	return nil
}
