// grpcpeer is grpc-go on both ends of xKit's reverse proxy
// (tests/integration/test_proxy_grpc_go.py). Messages are raw bytes (a codec
// of its own, so no generated code), the service described by hand.
//
//	grpcpeer server        listens on a free loopback port (h2c), prints the
//	                       port on a line, serves until killed
//	grpcpeer client ADDR   calls the service at ADDR (h2c) and prints one
//	                       JSON object of what came back, exit 0; or a
//	                       message and exit 1 when a call could not be made
//
// The service, xkit.test.Peer:
//
//	Echo     unary: the message back, header x-head: echo and trailer
//	         x-tail: <length>; a message "fail:<code>:<text>" is answered
//	         with that status code and text instead
//	Count    server streaming: the message is a count n; n messages
//	         "item <i>", then trailer x-count: n
//	Sum      client streaming: the lengths of the messages, summed
//	Chat     bidirectional: each message back upper-cased, then trailer
//	         x-seen: <messages>
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// rawCodec passes messages as the bytes they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "raw" }

func init() { encoding.RegisterCodec(rawCodec{}) }

// ---- The server ----

type peer struct{}

func echo(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	var in []byte
	if err := dec(&in); err != nil {
		return nil, err
	}
	if s, ok := strings.CutPrefix(string(in), "fail:"); ok {
		code, text, _ := strings.Cut(s, ":")
		n, _ := strconv.Atoi(code)
		return nil, status.Error(codes.Code(n), text)
	}
	grpc.SetHeader(ctx, metadata.Pairs("x-head", "echo"))
	grpc.SetTrailer(ctx, metadata.Pairs("x-tail", strconv.Itoa(len(in))))
	return &in, nil
}

func count(_ any, stream grpc.ServerStream) error {
	var in []byte
	if err := stream.RecvMsg(&in); err != nil {
		return err
	}
	n, err := strconv.Atoi(string(in))
	if err != nil {
		return status.Error(codes.InvalidArgument, "not a count")
	}
	for i := 0; i < n; i++ {
		out := []byte(fmt.Sprintf("item %d", i))
		if err := stream.SendMsg(&out); err != nil {
			return err
		}
	}
	stream.SetTrailer(metadata.Pairs("x-count", strconv.Itoa(n)))
	return nil
}

func sum(_ any, stream grpc.ServerStream) error {
	total := 0
	for {
		var in []byte
		err := stream.RecvMsg(&in)
		if err == io.EOF {
			out := []byte(strconv.Itoa(total))
			return stream.SendMsg(&out)
		}
		if err != nil {
			return err
		}
		total += len(in)
	}
}

func chat(_ any, stream grpc.ServerStream) error {
	seen := 0
	for {
		var in []byte
		err := stream.RecvMsg(&in)
		if err == io.EOF {
			stream.SetTrailer(metadata.Pairs("x-seen", strconv.Itoa(seen)))
			return nil
		}
		if err != nil {
			return err
		}
		seen++
		out := []byte(strings.ToUpper(string(in)))
		if err := stream.SendMsg(&out); err != nil {
			return err
		}
	}
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: "xkit.test.Peer",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Echo", Handler: echo}},
	Streams: []grpc.StreamDesc{
		{StreamName: "Count", Handler: count, ServerStreams: true},
		{StreamName: "Sum", Handler: sum, ClientStreams: true},
		{StreamName: "Chat", Handler: chat, ServerStreams: true, ClientStreams: true},
	},
}

func serve() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
	server.RegisterService(&serviceDesc, peer{})
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	if err := server.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// ---- The client ----

type callResult struct {
	Code     string            `json:"code"`
	Message  string            `json:"message"`
	Replies  []string          `json:"replies"`
	Headers  map[string]string `json:"headers"`
	Trailers map[string]string `json:"trailers"`
}

func firsts(md metadata.MD, names ...string) map[string]string {
	out := map[string]string{}
	for _, name := range names {
		if v := md.Get(name); len(v) > 0 {
			out[name] = v[0]
		}
	}
	return out
}

func result(err error, replies []string, header, trailer metadata.MD) callResult {
	s := status.Convert(err)
	return callResult{
		Code:     s.Code().String(),
		Message:  s.Message(),
		Replies:  replies,
		Headers:  firsts(header, "x-head"),
		Trailers: firsts(trailer, "x-tail", "x-count", "x-seen"),
	}
}

func unary(ctx context.Context, conn *grpc.ClientConn, msg []byte) callResult {
	var header, trailer metadata.MD
	var out []byte
	err := conn.Invoke(ctx, "/xkit.test.Peer/Echo", &msg, &out, grpc.Header(&header), grpc.Trailer(&trailer))
	var replies []string
	if err == nil {
		replies = []string{fmt.Sprintf("%d bytes, %s", len(out), digest(out))}
	}
	return result(err, replies, header, trailer)
}

// digest names a message by its length and first and last bytes (a large one is not printed).
func digest(b []byte) string {
	if len(b) <= 32 {
		return string(b)
	}
	return string(b[:8]) + "..." + string(b[len(b)-8:])
}

// stream sends sends (then closes its side) and reads every reply.
func stream(ctx context.Context, conn *grpc.ClientConn, method string, desc *grpc.StreamDesc, sends []string) callResult {
	s, err := conn.NewStream(ctx, desc, method)
	if err != nil {
		return result(err, nil, nil, nil)
	}
	for _, m := range sends {
		b := []byte(m)
		if err := s.SendMsg(&b); err != nil {
			break
		}
	}
	s.CloseSend()
	var replies []string
	for {
		var out []byte
		err = s.RecvMsg(&out)
		if err != nil {
			break
		}
		replies = append(replies, string(out))
	}
	if err == io.EOF {
		err = nil
	}
	header, _ := s.Header()
	return result(err, replies, header, s.Trailer())
}

func call(addr string) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	big := []byte(strings.Repeat("0123456789abcdef", 1<<16)) // 1 MiB
	chats := make([]string, 100)
	for i := range chats {
		chats[i] = fmt.Sprintf("message %d", i)
	}
	out := map[string]callResult{
		"echo":        unary(ctx, conn, []byte("hello")),
		"echo_big":    unary(ctx, conn, big),
		"fail":        unary(ctx, conn, []byte("fail:9:the precondition is not met")),
		"fail_denied": unary(ctx, conn, []byte("fail:7:no entry")),
		"count": stream(ctx, conn, "/xkit.test.Peer/Count",
			&grpc.StreamDesc{StreamName: "Count", ServerStreams: true}, []string{"50"}),
		"count_bad": stream(ctx, conn, "/xkit.test.Peer/Count",
			&grpc.StreamDesc{StreamName: "Count", ServerStreams: true}, []string{"many"}),
		"sum": stream(ctx, conn, "/xkit.test.Peer/Sum",
			&grpc.StreamDesc{StreamName: "Sum", ClientStreams: true}, []string{"a", "bb", "ccc", string(big)}),
		"chat": stream(ctx, conn, "/xkit.test.Peer/Chat",
			&grpc.StreamDesc{StreamName: "Chat", ServerStreams: true, ClientStreams: true}, chats),
	}
	var none []byte
	var header, trailer metadata.MD
	err = conn.Invoke(ctx, "/xkit.test.Nope/Missing", &none, &none, grpc.Header(&header), grpc.Trailer(&trailer))
	out["unknown"] = result(err, nil, header, trailer)
	json.NewEncoder(os.Stdout).Encode(out)
}

func main() {
	switch {
	case len(os.Args) == 2 && os.Args[1] == "server":
		serve()
	case len(os.Args) == 3 && os.Args[1] == "client":
		call(os.Args[2])
	default:
		fmt.Fprintln(os.Stderr, "usage: grpcpeer server | grpcpeer client HOST:PORT")
		os.Exit(2)
	}
}
