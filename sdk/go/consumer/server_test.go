package consumer

import (
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/siding-dev/siding/sdk/go/sidingv1"
)

var allBytes = func() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}()

// byKey answers as each delivery's key says.
var byKey = HandlerFunc(func(ctx context.Context, d Delivery) Result {
	switch string(d.Key) {
	case "call":
		return Dead(Call(ctx))
	case "retry":
		return Retry(1500*time.Millisecond, "later")
	case "dead":
		return Dead("poison")
	case "backoff":
		return Backoff(2*time.Second, "overloaded")
	case "panic":
		panic("database is down")
	case "echo":
		return Ack(Output{Topic: "echo", Key: d.Key, Value: d.Value, Headers: d.Headers})
	}
	return Ack()
})

// serve starts a Server on loopback; stop (idempotent) stops it and waits for Serve to return.
func serve(t *testing.T, h Handler, opts ...Option) (client sidingv1.ConsumerClient, conn *grpc.ClientConn, stop func() error) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- NewServer(h, opts...).Serve(ctx, lis) }()
	conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var result error
	var stopped atomic.Bool
	stop = func() error {
		if stopped.CompareAndSwap(false, true) {
			cancel()
			result = <-served
		}
		return result
	}
	t.Cleanup(func() { _ = stop(); _ = conn.Close() })
	return sidingv1.NewConsumerClient(conn), conn, stop
}

func delivery(n int64, key string, value []byte) *sidingv1.Delivery {
	m := &sidingv1.Delivery{Id: "orders/0/" + strconv.FormatInt(n, 10), Topic: "orders", Offset: n, Attempt: 1, Value: value}
	if key != "" {
		m.Key = []byte(key)
	}
	return m
}

func TestUnaryAnswers(t *testing.T) {
	client, _, _ := serve(t, byKey)
	tests := []struct {
		key     string
		verdict sidingv1.Verdict
		reason  string
	}{
		{"ack", sidingv1.Verdict_VERDICT_ACK, ""},
		{"retry", sidingv1.Verdict_VERDICT_RETRY, "later"},
		{"dead", sidingv1.Verdict_VERDICT_DEAD, "poison"},
		{"panic", sidingv1.Verdict_VERDICT_RETRY, "handler panicked: database is down"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			r, err := client.Deliver(context.Background(), delivery(1, tt.key, []byte("v")))
			if err != nil {
				t.Fatal(err)
			}
			if r.GetDeliveryId() != "orders/0/1" || r.GetVerdict() != tt.verdict || r.GetReason() != tt.reason {
				t.Errorf("got %v", r)
			}
		})
	}
}

func TestUnaryBackoffIsResourceExhausted(t *testing.T) {
	client, _, _ := serve(t, byKey)
	_, err := client.Deliver(context.Background(), delivery(1, "backoff", nil))
	if s, _ := status.FromError(err); s.Code() != codes.ResourceExhausted || s.Message() != "overloaded" {
		t.Fatalf("got %v, want RESOURCE_EXHAUSTED overloaded", err)
	}
}

func TestBinaryValuesAndOutputsTravelExactly(t *testing.T) {
	client, _, _ := serve(t, byKey)
	m := delivery(7, "echo", allBytes)
	m.Headers = []*sidingv1.Header{{Key: "h", Value: []byte{0, 0xff}}}
	r, err := client.Deliver(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	out := r.GetOutputs()
	if len(out) != 1 || !bytes.Equal(out[0].GetValue(), allBytes) || !bytes.Equal(out[0].GetHeaders()[0].GetValue(), []byte{0, 0xff}) {
		t.Fatalf("outputs = %v", out)
	}
}

func TestAStreamHandlesItsDeliveriesConcurrently(t *testing.T) {
	// The handler waits until all ten are inside it at once: only concurrent handling finishes.
	var inside atomic.Int32
	allIn := make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, d Delivery) Result {
		if inside.Add(1) == 10 {
			close(allIn)
		}
		<-allIn
		return byKey(ctx, d)
	})
	client, _, _ := serve(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := client.DeliverStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"ack", "dead", "backoff", "retry", "panic", "", "", "", "", ""}
	for n, key := range keys {
		if err := stream.Send(delivery(int64(n), key, nil)); err != nil {
			t.Fatal(err)
		}
	}
	_ = stream.CloseSend()
	got := map[string]*sidingv1.Result{}
	for {
		r, err := stream.Recv()
		if err != nil {
			break
		}
		got[r.GetDeliveryId()] = r
	}
	if len(got) != 10 {
		t.Fatalf("%d results, want 10", len(got))
	}
	if got["orders/0/1"].GetVerdict() != sidingv1.Verdict_VERDICT_DEAD || got["orders/0/2"].GetVerdict() != sidingv1.Verdict_VERDICT_RETRY {
		t.Errorf("results %v", got)
	}
}

func TestBatchesAreAnsweredPerDeliveryInAnyOrder(t *testing.T) {
	// offset 0 is held until offset 5, in a later frame, has been answered
	fiveDone := make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, d Delivery) Result {
		if d.Offset == 0 {
			<-fiveDone
		}
		r := byKey(ctx, d)
		if d.Offset == 5 {
			close(fiveDone)
		}
		return r
	})
	client, _, _ := serve(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := client.DeliverBatches(ctx)
	if err != nil {
		t.Fatal(err)
	}
	frames := []*sidingv1.DeliveryBatch{
		{Deliveries: []*sidingv1.Delivery{delivery(0, "", nil), delivery(1, "dead", nil), delivery(2, "retry", nil)}},
		{Deliveries: []*sidingv1.Delivery{delivery(3, "", nil), delivery(4, "panic", nil), delivery(5, "echo", allBytes)}},
	}
	for _, f := range frames {
		if err := stream.Send(f); err != nil {
			t.Fatal(err)
		}
	}
	_ = stream.CloseSend()
	var order []string
	got := map[string]*sidingv1.Result{}
	for {
		b, err := stream.Recv()
		if err != nil {
			break
		}
		for _, r := range b.GetResults() {
			order = append(order, r.GetDeliveryId())
			got[r.GetDeliveryId()] = r
		}
	}
	if len(order) != 6 || slices.Index(order, "orders/0/0") < slices.Index(order, "orders/0/5") {
		t.Fatalf("order %v: want six results, offset 0 after offset 5", order)
	}
	want := map[string]sidingv1.Verdict{
		"orders/0/0": sidingv1.Verdict_VERDICT_ACK, "orders/0/1": sidingv1.Verdict_VERDICT_DEAD,
		"orders/0/2": sidingv1.Verdict_VERDICT_RETRY, "orders/0/3": sidingv1.Verdict_VERDICT_ACK,
		"orders/0/4": sidingv1.Verdict_VERDICT_RETRY, "orders/0/5": sidingv1.Verdict_VERDICT_ACK,
	}
	for id, verdict := range want {
		if got[id].GetVerdict() != verdict {
			t.Errorf("%s: %v, want %v", id, got[id].GetVerdict(), verdict)
		}
	}
	if !bytes.Equal(got["orders/0/5"].GetOutputs()[0].GetValue(), allBytes) {
		t.Error("the binary value did not come back exactly")
	}
}

func TestResultsReadyTogetherLeaveInOneFrame(t *testing.T) {
	release := make(chan struct{})
	var arrived atomic.Int32
	h := HandlerFunc(func(context.Context, Delivery) Result {
		arrived.Add(1)
		<-release
		return Ack()
	})
	client, _, _ := serve(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, _ := client.DeliverBatches(ctx)
	batch := &sidingv1.DeliveryBatch{}
	for n := range int64(64) {
		batch.Deliveries = append(batch.Deliveries, delivery(n, "", nil))
	}
	_ = stream.Send(batch)
	for arrived.Load() < 64 {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	_ = stream.CloseSend()
	var sizes []int
	for total := 0; total < 64; {
		b, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(b.GetResults()))
		total += len(b.GetResults())
	}
	if len(sizes) >= 64 {
		t.Errorf("one frame per result: %v", sizes)
	}
}

func healthOf(t *testing.T, conn *grpc.ClientConn) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: ServiceName})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN
	}
	return r.GetStatus()
}

func TestStopFinishesDeliveriesInFlightThenStops(t *testing.T) {
	for _, rpc := range []string{"stream", "batches", "unary"} {
		t.Run(rpc, func(t *testing.T) {
			arrived, release := make(chan struct{}), make(chan struct{})
			h := HandlerFunc(func(context.Context, Delivery) Result {
				close(arrived)
				<-release
				return Ack()
			})
			client, conn, stop := serve(t, h, WithGracePeriod(10*time.Second))
			if s := healthOf(t, conn); s != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health %v, want SERVING", s)
			}
			answered := make(chan []string, 1)
			go func() { answered <- deliverOne(client, rpc) }()
			<-arrived
			stopped := make(chan error, 1)
			go func() { stopped <- stop() }()
			// While it drains: unhealthy, no new unary delivery, the call in flight still open
			waitFor(t, func() bool { return healthOf(t, conn) != healthpb.HealthCheckResponse_SERVING })
			_, err := client.Deliver(context.Background(), delivery(9, "", nil))
			if code := status.Code(err); code != codes.Unavailable {
				t.Errorf("a new delivery while stopping: %v, want UNAVAILABLE", err)
			}
			select {
			case <-stopped:
				t.Fatal("stopped before the delivery in flight was answered")
			case <-time.After(100 * time.Millisecond):
			}
			close(release)
			if ids := <-answered; len(ids) != 1 || ids[0] != "orders/0/1" {
				t.Errorf("answered %v", ids)
			}
			if err := <-stopped; err != nil {
				t.Errorf("Serve returned %v", err)
			}
		})
	}
}

func TestStopCancelsWhatOutlivesTheGracePeriod(t *testing.T) {
	arrived := make(chan struct{})
	cancelled := make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, _ Delivery) Result {
		close(arrived)
		<-ctx.Done()
		close(cancelled)
		return Ack()
	})
	client, _, stop := serve(t, h, WithGracePeriod(200*time.Millisecond))
	go deliverOne(client, "stream")
	<-arrived
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context was never cancelled")
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("stop took %v", waited)
	}
}

func TestCallTellsHowADeliveryArrived(t *testing.T) {
	client, _, _ := serve(t, byKey)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := client.Deliver(ctx, delivery(1, "call", nil))
	if err != nil || r.GetReason() != "Deliver" {
		t.Errorf("unary: %v %v", r, err)
	}
	stream, _ := client.DeliverStream(ctx)
	_ = stream.Send(delivery(2, "call", nil))
	if r, err := stream.Recv(); err != nil || r.GetReason() != "DeliverStream" {
		t.Errorf("stream: %v %v", r, err)
	}
	batches, _ := client.DeliverBatches(ctx)
	_ = batches.Send(&sidingv1.DeliveryBatch{Deliveries: []*sidingv1.Delivery{delivery(3, "call", nil)}})
	if b, err := batches.Recv(); err != nil || b.GetResults()[0].GetReason() != "DeliverBatches" {
		t.Errorf("batches: %v %v", b, err)
	}
	if Call(context.Background()) != "" {
		t.Error("Call outside a handler is not empty")
	}
}

func deliverOne(client sidingv1.ConsumerClient, rpc string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var ids []string
	switch rpc {
	case "unary":
		r, err := client.Deliver(ctx, delivery(1, "", nil))
		if err == nil {
			ids = append(ids, r.GetDeliveryId())
		}
	case "stream":
		s, err := client.DeliverStream(ctx)
		if err != nil {
			return nil
		}
		_ = s.Send(delivery(1, "", nil))
		for r, err := s.Recv(); err == nil; r, err = s.Recv() {
			ids = append(ids, r.GetDeliveryId())
		}
	case "batches":
		s, err := client.DeliverBatches(ctx)
		if err != nil {
			return nil
		}
		_ = s.Send(&sidingv1.DeliveryBatch{Deliveries: []*sidingv1.Delivery{delivery(1, "", nil)}})
		for b, err := s.Recv(); err == nil; b, err = s.Recv() {
			for _, r := range b.GetResults() {
				ids = append(ids, r.GetDeliveryId())
			}
		}
	}
	sort.Strings(ids)
	return ids
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestListenAndServeRefusesABusyPort(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	err = ListenAndServe(context.Background(), lis.Addr().String(), byKey)
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Fatalf("got %v, want a listen error", err)
	}
}
