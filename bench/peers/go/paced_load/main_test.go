package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestPercentileIsTheNearestRank(t *testing.T) {
	var sorted []time.Duration
	for i := 1; i <= 1000; i++ {
		sorted = append(sorted, time.Duration(i))
	}
	for q, want := range map[float64]time.Duration{0.5: 500, 0.99: 990, 0.999: 999, 1: 1000} {
		if got := percentile(sorted, q); got != want {
			t.Errorf("percentile(%v) = %v, want %v", q, got, want)
		}
	}
	if got := percentile(sorted[:1], 0.99); got != 1 {
		t.Errorf("one sample: %v", got)
	}
}

func options(t *testing.T, server *httptest.Server, path string) Options {
	u, err := url.Parse(server.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	return Options{URL: u, Conns: 4, Rate: 400, Duration: 500 * time.Millisecond, Timeout: 2 * time.Second}
}

// The schedule is kept (about rate × duration requests) and every answer is checked.
func TestRunKeepsTheScheduleAndChecksAnswers(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			body, _ := io.ReadAll(r.Body) // read whole before answering, as net/http asks
			w.Write(body)
			return
		}
		io.WriteString(w, "2")
	}))
	defer server.Close()

	get := options(t, server, "/baseline11?a=1&b=1")
	get.Expect = []byte("2")
	report := Run(get)
	if report.Errors != 0 || report.Requests < 180 || report.Requests > 201 {
		t.Fatalf("GET: %+v", report)
	}
	if report.P50Us <= 0 || report.P99Us < report.P50Us || report.MaxUs < report.P999Us {
		t.Fatalf("latencies out of order: %+v", report)
	}

	post := options(t, server, "/echo")
	post.Body, post.Echo = []byte(strings.Repeat("x", 10240)), true
	if report := Run(post); report.Errors != 0 || report.Requests == 0 {
		t.Fatalf("POST: %+v", report)
	}

	wrong := options(t, server, "/baseline11?a=1&b=1")
	wrong.Expect = []byte("3")
	if report := Run(wrong); report.Errors == 0 || !strings.Contains(report.FirstError, "differ") {
		t.Fatalf("a wrong answer was not caught: %+v", report)
	}
}

func TestParseOptionsRejectsWhatCannotRun(t *testing.T) {
	cases := map[string]func() error{
		"not http": func() error {
			_, err := parseOptions("ftp://x/", 1, 1, time.Second, "", "", false, time.Second)
			return err
		},
		"no rate": func() error {
			_, err := parseOptions("http://127.0.0.1:1/", 1, 0, time.Second, "", "", false, time.Second)
			return err
		},
		"echo without body": func() error {
			_, err := parseOptions("http://127.0.0.1:1/", 1, 1, time.Second, "", "", true, time.Second)
			return err
		},
	}
	for name, call := range cases {
		if call() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
