// Command paced_load is the paced HTTP/1.1 load generator of `xkbench arena`
// (the arena's latency-10k and 8gbit profiles), written because no paced load
// generator (wrk2) is packaged in Debian. It keeps -conns keep-alive
// connections (TLS with ALPN http/1.1 for an https URL, the certificate not
// checked) and sends -rate requests per second in all on a fixed schedule:
// request k of connection c is due at start + (c + k*conns)/rate. A request
// is sent when it is due or, if the connection is still waiting for the one
// before, as soon as that answers; its latency is counted from when it was
// due, not from when it went out, so a stalled server shows in the latency
// instead of slowing the schedule (no coordinated omission). Every answer
// must be 200 with the body -expect names, or with -body FILE (a POST) the
// body sent when -echo is set. It prints one JSON object (see Report) and
// exits 1 when any request failed.
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"
)

// Report is what paced_load prints: counts, the rate reached and the latency
// (from each request's due time to its answer's last byte) in microseconds.
type Report struct {
	Requests   int64   `json:"requests"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	TargetRate float64 `json:"target_rate"`
	Rate       float64 `json:"rate"`
	MeanUs     float64 `json:"mean_us"`
	P50Us      float64 `json:"p50_us"`
	P99Us      float64 `json:"p99_us"`
	P999Us     float64 `json:"p999_us"`
	MaxUs      float64 `json:"max_us"`
}

// Options is one run's settings, from the flags.
type Options struct {
	URL      *url.URL
	Conns    int
	Rate     float64
	Duration time.Duration
	Body     []byte // nil: GET
	Expect   []byte // the body every answer must have (nil: any, unless Echo)
	Echo     bool   // every answer's body must be the request's
	Timeout  time.Duration
}

// outcome is one connection's tally.
type outcome struct {
	latencies []time.Duration
	errors    int64
	first     error
}

func main() {
	target := flag.String("url", "http://127.0.0.1:8080/baseline11?a=1&b=1", "what to ask for (http or https)")
	conns := flag.Int("conns", 16, "keep-alive connections")
	rate := flag.Float64("rate", 10000, "requests per second, over all connections")
	duration := flag.Duration("duration", 5*time.Second, "how long requests are scheduled for")
	bodyFile := flag.String("body", "", "POST this file's bytes (default: GET)")
	expect := flag.String("expect", "", "the body every answer must have (default: any)")
	echo := flag.Bool("echo", false, "every answer must be the body sent (with -body)")
	timeout := flag.Duration("timeout", 10*time.Second, "longest wait for one answer")
	flag.Parse()
	options, err := parseOptions(*target, *conns, *rate, *duration, *bodyFile, *expect, *echo, *timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "paced_load:", err)
		os.Exit(2)
	}
	report := Run(options)
	out, _ := json.Marshal(report)
	fmt.Println(string(out))
	if report.Errors > 0 {
		os.Exit(1)
	}
}

func parseOptions(target string, conns int, rate float64, duration time.Duration, bodyFile, expect string,
	echo bool, timeout time.Duration) (Options, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Options{}, fmt.Errorf("-url %q: an http or https URL is needed", target)
	}
	if conns < 1 || rate <= 0 || duration <= 0 {
		return Options{}, errors.New("-conns, -rate and -duration must be positive")
	}
	options := Options{URL: u, Conns: conns, Rate: rate, Duration: duration, Echo: echo, Timeout: timeout}
	if bodyFile != "" {
		if options.Body, err = os.ReadFile(bodyFile); err != nil {
			return Options{}, err
		}
	} else if echo {
		return Options{}, errors.New("-echo needs -body")
	}
	if expect != "" {
		options.Expect = []byte(expect)
	}
	return options, nil
}

// request is the bytes of one request, written the same every time.
func request(o Options) []byte {
	var b bytes.Buffer
	method := "GET"
	if o.Body != nil {
		method = "POST"
	}
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, o.URL.RequestURI(), o.URL.Host)
	if o.Body != nil {
		fmt.Fprintf(&b, "Content-Type: application/octet-stream\r\nContent-Length: %d\r\n", len(o.Body))
	}
	b.WriteString("\r\n")
	b.Write(o.Body)
	return b.Bytes()
}

func dial(o Options) (net.Conn, error) {
	conn, err := net.DialTimeout("tcp", o.URL.Host, o.Timeout)
	if err != nil || o.URL.Scheme == "http" {
		return conn, err
	}
	client := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"},
		ServerName: o.URL.Hostname()})
	client.SetDeadline(time.Now().Add(o.Timeout))
	if err := client.Handshake(); err != nil {
		conn.Close()
		return nil, err
	}
	return client, nil
}

// check reads one answer and says what is wrong with it, if anything.
func check(reader *bufio.Reader, o Options) error {
	response, err := http.ReadResponse(reader, nil)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(response.Body)
	response.Body.Close()
	if err != nil {
		return err
	}
	if response.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", response.StatusCode)
	}
	if response.Close {
		return errors.New("the server closed the connection")
	}
	want := o.Expect
	if o.Echo {
		want = o.Body
	}
	if want != nil && !bytes.Equal(body, want) {
		return fmt.Errorf("answered %d bytes that differ from the %d expected", len(body), len(want))
	}
	return nil
}

// Run connects every connection, then keeps the schedule for o.Duration.
func Run(o Options) Report {
	conns := make([]net.Conn, o.Conns)
	for c := range conns {
		conn, err := dial(o)
		if err != nil {
			for _, open := range conns[:c] {
				open.Close()
			}
			return Report{Errors: 1, FirstError: "connect: " + err.Error(), TargetRate: o.Rate}
		}
		conns[c] = conn
	}
	payload := request(o)
	interval := time.Duration(float64(time.Second) * float64(o.Conns) / o.Rate)
	start := time.Now().Add(10 * time.Millisecond)
	end := start.Add(o.Duration)
	outcomes := make([]outcome, o.Conns)
	var wg sync.WaitGroup
	for c, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			first := start.Add(time.Duration(float64(time.Second) * float64(c) / o.Rate))
			outcomes[c] = drive(conn, o, payload, first, interval, end)
		}()
	}
	wg.Wait()
	return summarize(outcomes, o.Rate, time.Since(start).Seconds())
}

// drive sends one connection's share of the schedule; it stops at its first error.
func drive(conn net.Conn, o Options, payload []byte, due time.Time, interval time.Duration, end time.Time) outcome {
	var out outcome
	reader := bufio.NewReaderSize(conn, 64<<10)
	for ; due.Before(end); due = due.Add(interval) {
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		conn.SetDeadline(time.Now().Add(o.Timeout))
		_, err := conn.Write(payload)
		if err == nil {
			err = check(reader, o)
		}
		if err != nil {
			out.errors++
			out.first = err
			return out
		}
		out.latencies = append(out.latencies, time.Since(due))
	}
	return out
}

// summarize folds the connections' tallies into the report.
func summarize(outcomes []outcome, target, seconds float64) Report {
	var all []time.Duration
	report := Report{TargetRate: target, Seconds: seconds}
	for _, out := range outcomes {
		all = append(all, out.latencies...)
		report.Errors += out.errors
		if out.first != nil && report.FirstError == "" {
			report.FirstError = out.first.Error()
		}
	}
	report.Requests = int64(len(all))
	if len(all) == 0 {
		return report
	}
	slices.Sort(all)
	var sum time.Duration
	for _, d := range all {
		sum += d
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	report.Rate = float64(len(all)) / seconds
	report.MeanUs = us(sum) / float64(len(all))
	report.P50Us = us(percentile(all, 0.50))
	report.P99Us = us(percentile(all, 0.99))
	report.P999Us = us(percentile(all, 0.999))
	report.MaxUs = us(all[len(all)-1])
	return report
}

// percentile is the value below which the fraction q of the sorted latencies lie (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	rank := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}
