package consumer

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // siding's compression = "gzip": decode gzip calls
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/siding-dev/siding/sdk/go/sidingv1"
)

// ServiceName is the gRPC service siding calls, and the name its health checks ask about.
const ServiceName = "siding.v1.Consumer"

// DefaultGracePeriod is how long a stopping server lets deliveries in flight finish.
const DefaultGracePeriod = 10 * time.Second

// siding sends records up to its route's max_message_bytes (64 MiB at most by default); gRPC's
// own 4 MiB default would refuse big records.
const defaultMaxReceiveBytes = 64 << 20

// A Server serves one Handler over gRPC: Deliver, DeliverStream, DeliverBatches and gRPC
// health checking (SERVING until it stops).
//
// Stopping is graceful: health turns NOT_SERVING, new deliveries are refused (a unary call
// gets UNAVAILABLE, which siding takes as "back off"; a stream reads no more), deliveries in
// flight get up to the grace period to finish and are answered, then streams end and the
// server stops. What is still running after the grace period is cancelled.
type Server struct {
	handler Handler
	opts    options
	grpc    *grpc.Server
	health  *health.Server

	mu       sync.Mutex
	draining bool
	drain    chan struct{} // closed when stopping begins
	inflight sync.WaitGroup
	hardStop context.CancelFunc
	base     context.Context // parent of every handler's context; cancelled after the grace
	joined   *Registration   // WithJoin's registration while serving
}

// An Option configures a Server.
type Option func(*options)

type options struct {
	grace      time.Duration
	serverOpts []grpc.ServerOption
	logger     *slog.Logger
	join       *Join
}

// WithGracePeriod sets how long deliveries in flight may finish once stopping begins.
func WithGracePeriod(d time.Duration) Option { return func(o *options) { o.grace = d } }

// WithServerOptions adds gRPC server options (TLS credentials, interceptors, limits).
func WithServerOptions(opts ...grpc.ServerOption) Option {
	return func(o *options) { o.serverOpts = append(o.serverOpts, opts...) }
}

// WithJoin makes Serve join a siding route once it listens, renew the lease while it serves
// and leave it first thing when it stops (see Register). An empty j.Address is filled from the
// listener (Advertised); j.Transport is siding's default, "grpc", unless set ("grpcs" with TLS).
func WithJoin(j Join) Option { return func(o *options) { o.join = &j } }

// WithLogger sets where the server logs (handler panics, streams ending); slog.Default() if unset.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// NewServer builds a server for h; Serve starts it.
func NewServer(h Handler, opts ...Option) *Server {
	o := options{grace: DefaultGracePeriod, logger: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	base, cancel := context.WithCancel(context.Background())
	s := &Server{
		handler:  h,
		opts:     o,
		health:   health.NewServer(),
		drain:    make(chan struct{}),
		base:     base,
		hardStop: cancel,
	}
	serverOpts := append([]grpc.ServerOption{grpc.MaxRecvMsgSize(defaultMaxReceiveBytes)}, o.serverOpts...)
	s.grpc = grpc.NewServer(serverOpts...)
	sidingv1.RegisterConsumerServer(s.grpc, &service{s: s})
	healthpb.RegisterHealthServer(s.grpc, s.health)
	s.health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s
}

// ListenAndServe serves h on addr ("host:port") until ctx ends, then stops gracefully.
func ListenAndServe(ctx context.Context, addr string, h Handler, opts ...Option) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return NewServer(h, opts...).Serve(ctx, lis)
}

// Serve answers deliveries on lis until ctx ends, then stops gracefully and returns nil; or
// returns the error that stopped it. A Server serves once.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	served := make(chan error, 1)
	go func() { served <- s.grpc.Serve(lis) }()
	if j := s.opts.join; j != nil {
		if err := s.register(ctx, *j, lis.Addr()); err != nil {
			s.Stop()
			<-served
			return err
		}
	}
	select {
	case err := <-served:
		s.hardStop()
		return err
	case <-ctx.Done():
		s.Stop()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return err
		}
		return nil
	}
}

func (s *Server) register(ctx context.Context, j Join, addr net.Addr) error {
	if j.Address == "" {
		j.Address = Advertised(addr)
	}
	if j.Logger == nil {
		j.Logger = s.opts.logger
	}
	reg, err := Register(ctx, j)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.joined = reg
	s.mu.Unlock()
	return nil
}

// Registration is the route joined with WithJoin while the server serves, or nil.
func (s *Server) Registration() *Registration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.joined
}

// Stop stops the server gracefully (see Server); it returns when the server has stopped. With
// WithJoin it leaves the route first: siding sends nothing new once the leave is answered.
func (s *Server) Stop() {
	s.mu.Lock()
	joined := s.joined
	s.joined = nil
	s.mu.Unlock()
	if joined != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := joined.Leave(ctx); err != nil {
			s.opts.logger.Warn("leaving the route failed: its lease will lapse", "route", joined.join.Route, "err", err)
		}
		cancel()
	}
	s.mu.Lock()
	if !s.draining {
		s.draining = true
		close(s.drain)
	}
	s.mu.Unlock()
	s.health.Shutdown()

	finished := make(chan struct{})
	go func() {
		s.inflight.Wait()
		s.grpc.GracefulStop() // streams end once their deliveries are answered
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(s.opts.grace):
		s.opts.logger.Warn("grace period over: cancelling deliveries still in flight", "grace", s.opts.grace)
		s.hardStop()
		s.grpc.Stop()
		<-finished
	}
	s.hardStop()
}

// begin counts a delivery in flight, unless the server is stopping.
func (s *Server) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	s.inflight.Add(1)
	return true
}

// answer runs the handler for one delivery; ctx is the call's, cut off at the hard stop.
func (s *Server) answer(ctx context.Context, m *sidingv1.Delivery) Result {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.base, cancel)
	defer stop()
	return call(ctx, s.handler, deliveryFromProto(m), s.opts.logger)
}

type service struct {
	sidingv1.UnimplementedConsumerServer
	s *Server
}

var errStopping = status.Error(codes.Unavailable, "the consumer is stopping")

func (v *service) Deliver(ctx context.Context, m *sidingv1.Delivery) (*sidingv1.Result, error) {
	if !v.s.begin() {
		return nil, errStopping
	}
	defer v.s.inflight.Done()
	r := v.s.answer(withCall(ctx, "Deliver"), m)
	if r.IsBackoff() {
		return nil, status.Error(codes.ResourceExhausted, r.Reason())
	}
	return r.toProto(m.GetId()), nil
}

func (v *service) DeliverStream(stream grpc.BidiStreamingServer[sidingv1.Delivery, sidingv1.Result]) error {
	recv := func() ([]*sidingv1.Delivery, error) {
		m, err := stream.Recv()
		return []*sidingv1.Delivery{m}, err
	}
	send := func(results []*sidingv1.Result) error {
		for _, r := range results {
			if err := stream.Send(r); err != nil {
				return err
			}
		}
		return nil
	}
	return v.s.session(withCall(stream.Context(), "DeliverStream"), recv, send)
}

func (v *service) DeliverBatches(stream grpc.BidiStreamingServer[sidingv1.DeliveryBatch, sidingv1.ResultBatch]) error {
	recv := func() ([]*sidingv1.Delivery, error) {
		m, err := stream.Recv()
		return m.GetDeliveries(), err
	}
	send := func(results []*sidingv1.Result) error {
		return stream.Send(&sidingv1.ResultBatch{Results: results})
	}
	return v.s.session(withCall(stream.Context(), "DeliverBatches"), recv, send)
}

// session serves one stream: every delivery read is handled in its own goroutine, results go
// back as they are ready (all results ready at once in one send). It ends when the client
// stops sending, or stopping begins, and every delivery read has been answered.
func (s *Server) session(
	ctx context.Context,
	recv func() ([]*sidingv1.Delivery, error),
	send func([]*sidingv1.Result) error,
) error {
	incoming := make(chan []*sidingv1.Delivery)
	recvErr := make(chan error, 1)
	go func() {
		for {
			ds, err := recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case incoming <- ds:
			case <-ctx.Done():
				return
			}
		}
	}()

	results := make(chan *sidingv1.Result, 256)
	pending := 0
	in, errs, drain := incoming, recvErr, s.drain
	for in != nil || pending > 0 {
		select {
		case ds := <-in:
			for _, m := range ds {
				if !s.begin() {
					continue // stopping: left unanswered, siding delivers it again
				}
				pending++
				go func(m *sidingv1.Delivery) {
					defer s.inflight.Done()
					r := s.answer(ctx, m).toProto(m.GetId())
					select {
					case results <- r:
					case <-ctx.Done():
					}
				}(m)
			}
		case err := <-errs:
			if !errors.Is(err, io.EOF) {
				s.opts.logger.Debug("stream ended by the client", "error", err)
			}
			in, errs, drain = nil, nil, nil
		case <-drain:
			in, errs, drain = nil, nil, nil
		case r := <-results:
			runtime.Gosched() // let handlers finishing at this moment join the frame
			frame := []*sidingv1.Result{r}
			for more := true; more; {
				select {
				case r := <-results:
					frame = append(frame, r)
				default:
					more = false
				}
			}
			pending -= len(frame)
			if err := send(frame); err != nil {
				return err
			}
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	return nil
}
