// Command h3goclient is quic-go's HTTP/3 client run against xKit by test_http3_interop.py:
// GET /ping, POST /echo with a body, and GET of a static file, each on one HTTP/3 connection,
// reported as JSON on stdout for the test to check.
// Usage: h3goclient BASE_URL CA_FILE STATIC_PATH (BASE_URL: https://127.0.0.1:PORT).
package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// report is what the test checks.
type report struct {
	Protos      []string `json:"protos"`
	Ping        string   `json:"ping"`
	EchoLength  int      `json:"echo_length"`
	EchoSame    bool     `json:"echo_same"`
	StaticSize  int      `json:"static_size"`
	StaticHash  string   `json:"static_sha256"`
	StaticType  string   `json:"static_type"`
	Connections int      `json:"connections"`
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: h3goclient BASE_URL CA_FILE STATIC_PATH")
		os.Exit(2)
	}
	base, caFile, staticPath := os.Args[1], os.Args[2], os.Args[3]
	pem, err := os.ReadFile(caFile)
	check(err)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		check(fmt.Errorf("no certificate in %s", caFile))
	}
	connections := 0
	transport := &http3.Transport{
		TLSClientConfig:    &tls.Config{RootCAs: pool, ServerName: "localhost"},
		DisableCompression: true,
	}
	defer transport.Close()
	client := &http.Client{Transport: countingTransport{transport, &connections}, Timeout: 30 * time.Second}

	var r report
	body, proto := fetch(client, "GET", base+"/ping", nil)
	r.Protos = append(r.Protos, proto)
	r.Ping = string(body)

	sent := make([]byte, 200000)
	_, err = rand.Read(sent)
	check(err)
	body, proto = fetch(client, "POST", base+"/echo", sent)
	r.Protos = append(r.Protos, proto)
	r.EchoLength = len(body)
	r.EchoSame = bytes.Equal(body, sent)

	req, err := http.NewRequest("GET", base+staticPath, nil)
	check(err)
	res, err := client.Do(req)
	check(err)
	file, err := io.ReadAll(res.Body)
	check(err)
	res.Body.Close()
	if res.StatusCode != 200 {
		check(fmt.Errorf("GET %s: %s", staticPath, res.Status))
	}
	r.Protos = append(r.Protos, res.Proto)
	sum := sha256.Sum256(file)
	r.StaticSize, r.StaticHash, r.StaticType = len(file), hex.EncodeToString(sum[:]), res.Header.Get("Content-Type")
	r.Connections = connections
	check(json.NewEncoder(os.Stdout).Encode(r))
}

// countingTransport counts the requests that found no connection to reuse (a new QUIC handshake).
type countingTransport struct {
	t     *http3.Transport
	count *int
}

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := c.t.RoundTripOpt(req, http3.RoundTripOpt{OnlyCachedConn: true})
	if err == http3.ErrNoCachedConn {
		*c.count++
		res, err = c.t.RoundTrip(req)
	}
	return res, err
}

func fetch(client *http.Client, method, url string, body []byte) ([]byte, string) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	check(err)
	res, err := client.Do(req)
	check(err)
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	check(err)
	if res.StatusCode != 200 {
		check(fmt.Errorf("%s %s: %s", method, url, res.Status))
	}
	return got, res.Proto
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "h3goclient:", err)
		os.Exit(1)
	}
}
