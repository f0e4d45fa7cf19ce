package consumer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// A Join says which siding route a service joins (docs/registration.md): the control API's
// URL, the route, its registration token, and how siding reaches this service.
type Join struct {
	ControlURL string // siding's control API, e.g. "http://siding:9464"
	Route      string
	Token      string // the route's registration token (or the admin token); never logged
	// Address is how siding dials this service: "host:port" ("host:port/path" over HTTP) or a
	// whole endpoint URL. WithJoin fills it from the listener when empty.
	Address string
	// Transport is "grpc" (siding's default), "grpcs", "http" or "https".
	Transport string
	// Capacity weighs how deliveries are spread (1 to 100,000); 0 leaves siding's default, 100.
	Capacity int
	// OnEvent, if set, is told of every join, lapse, failure and leave.
	OnEvent func(RegistrationEvent)
	// Client makes the calls; a client with a 10 s timeout if nil.
	Client *http.Client
	// Logger logs the events; slog.Default() if nil.
	Logger *slog.Logger
}

// String describes j without its token.
func (j Join) String() string {
	return fmt.Sprintf("Join{route %s at %s as %s}", j.Route, j.ControlURL, j.Address)
}

// An EventKind says what happened to a registration.
type EventKind string

// The events of a registration.
const (
	EventJoined      EventKind = "joined"
	EventLapsed      EventKind = "lapsed"      // a renewal answered 404: joining again
	EventUnreachable EventKind = "unreachable" // no answer, or a 5xx: trying again later
	EventRefused     EventKind = "refused"     // any other 4xx
	EventLeft        EventKind = "left"
)

// A RegistrationEvent is told to Join.OnEvent. Status is siding's HTTP status (0 when it did not
// answer); Detail its reason or the connection error, never the token.
type RegistrationEvent struct {
	Kind     EventKind
	Route    string
	Consumer string
	Status   int
	Detail   string
}

// A RegistrationError is siding refusing a join: Status is its HTTP status.
type RegistrationError struct {
	Route  string
	Status int
	Reason string
}

func (e *RegistrationError) Error() string {
	return fmt.Sprintf("joining route %s was refused (%d): %s", e.Route, e.Status, e.Reason)
}

type unreachableError struct {
	status int
	detail string
}

func (e *unreachableError) Error() string { return e.detail }

const (
	firstRetry   = 500 * time.Millisecond
	noLeaseEvery = 5 * time.Second
)

// joinBody is what POST /routes/<route>/consumers carries for j.
func joinBody(j Join) map[string]any {
	body := map[string]any{"address": j.Address}
	if j.Transport != "" {
		body["transport"] = j.Transport
	}
	if j.Capacity != 0 {
		body["capacity"] = j.Capacity
	}
	return body
}

// RenewEvery is how often a lease is renewed: three times per lease.
func RenewEvery(lease time.Duration) time.Duration { return lease / 3 }

// RetryAfter is the wait after failures failed calls in a row: 0.5 s, doubling, at most every.
func RetryAfter(failures int, every time.Duration) time.Duration {
	wait := firstRetry
	for i := 1; i < failures && wait < every; i++ {
		wait *= 2
	}
	return min(wait, every)
}

// Advertised is the "host:port" siding should dial for a listener at addr: this machine's host
// name when it listens on every interface.
func Advertised(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if name, err := os.Hostname(); err == nil {
			host = name
		}
	}
	return net.JoinHostPort(host, port)
}

// A Registration is one instance's place on one route. Register joins and renews it in the
// background every lease/3: a renewal answered 404 joins again; a connection error or a 5xx is
// retried after a back-off (0.5 s doubling, at most the renewal interval) and never stops the
// service. Leave leaves; Close stops renewing and lets the lease lapse.
type Registration struct {
	join    Join
	url     string
	body    []byte
	client  *http.Client
	logger  *slog.Logger
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	id      string
	lease   time.Duration
	failing int
}

// Register joins j.Route now and keeps the lease in the background. A refusal (a wrong token,
// no such route, a bad address) is a *RegistrationError; when siding cannot be reached the join
// is retried in the background and Register returns nil.
func Register(ctx context.Context, j Join) (*Registration, error) {
	if j.Token == "" {
		return nil, fmt.Errorf("joining route %s needs its registration token", j.Route)
	}
	raw, err := json.Marshal(joinBody(j))
	if err != nil {
		return nil, err
	}
	r := &Registration{
		join:   j,
		url:    strings.TrimRight(j.ControlURL, "/") + "/routes/" + url.PathEscape(j.Route) + "/consumers",
		body:   raw,
		client: j.Client,
		logger: j.Logger,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if r.client == nil {
		r.client = &http.Client{Timeout: 10 * time.Second}
	}
	if r.logger == nil {
		r.logger = slog.Default()
	}
	if err := r.doJoin(ctx); err != nil {
		var down *unreachableError
		if !errors.As(err, &down) {
			return nil, err
		}
		r.failing = 1
		r.event(EventUnreachable, down.status, down.detail, "")
	}
	go r.keep()
	return r, nil
}

// String describes r without its token.
func (r *Registration) String() string {
	return fmt.Sprintf("Registration{route %s, consumer %q}", r.join.Route, r.Consumer())
}

// Consumer is the id siding gave this instance ("" while not joined).
func (r *Registration) Consumer() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.id
}

// Close stops renewing without leaving: the lease lapses.
func (r *Registration) Close() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

// Leave stops renewing and leaves the route; siding sends nothing new once it has answered.
func (r *Registration) Leave(ctx context.Context) error {
	r.Close()
	r.mu.Lock()
	id := r.id
	r.id = ""
	r.mu.Unlock()
	if id == "" {
		return nil
	}
	status, answer, err := r.call(ctx, http.MethodDelete, r.url+"/"+id, nil)
	if err != nil {
		return err
	}
	if status != http.StatusOK && status != http.StatusNotFound {
		r.event(EventRefused, status, reason(answer), id)
		return &RegistrationError{Route: r.join.Route, Status: status, Reason: reason(answer)}
	}
	r.event(EventLeft, status, "", id)
	return nil
}

func (r *Registration) every() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lease <= 0 {
		return noLeaseEvery
	}
	return RenewEvery(r.lease)
}

func (r *Registration) keep() {
	defer close(r.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		wait := r.every()
		if r.failing > 0 {
			wait = RetryAfter(r.failing, wait)
		}
		select {
		case <-r.stop:
			return
		case <-time.After(wait):
		}
		err := r.tick(ctx)
		if err == nil {
			r.failing = 0
			continue
		}
		if ctx.Err() != nil {
			return
		}
		r.failing++
		var down *unreachableError
		var refused *RegistrationError
		switch {
		case errors.As(err, &down):
			r.event(EventUnreachable, down.status, down.detail, "")
		case errors.As(err, &refused):
			r.event(EventRefused, refused.Status, err.Error(), "")
		default:
			r.event(EventRefused, 0, err.Error(), "")
		}
	}
}

func (r *Registration) tick(ctx context.Context) error {
	if r.Consumer() != "" {
		renewed, err := r.renew(ctx)
		if err != nil || renewed {
			return err
		}
	}
	return r.doJoin(ctx)
}

func (r *Registration) doJoin(ctx context.Context) error {
	status, answer, err := r.call(ctx, http.MethodPost, r.url, r.body)
	if err != nil {
		return err
	}
	if status != http.StatusOK && status != http.StatusCreated {
		return &RegistrationError{Route: r.join.Route, Status: status, Reason: reason(answer)}
	}
	id, _ := answer["consumer"].(string)
	lease, _ := answer["lease_s"].(float64)
	r.mu.Lock()
	r.id, r.lease = id, time.Duration(lease*float64(time.Second))
	r.mu.Unlock()
	address, _ := answer["address"].(string)
	r.event(EventJoined, status, address, "")
	return nil
}

// renew is false when the lease is gone (404): join again.
func (r *Registration) renew(ctx context.Context) (bool, error) {
	id := r.Consumer()
	status, answer, err := r.call(ctx, http.MethodPut, r.url+"/"+id, nil)
	if err != nil {
		return false, err
	}
	switch status {
	case http.StatusOK:
		if lease, ok := answer["lease_s"].(float64); ok && lease > 0 {
			r.mu.Lock()
			r.lease = time.Duration(lease * float64(time.Second))
			r.mu.Unlock()
		}
		return true, nil
	case http.StatusNotFound:
		r.event(EventLapsed, status, reason(answer), "")
		r.mu.Lock()
		r.id = ""
		r.mu.Unlock()
		return false, nil
	}
	return false, &RegistrationError{Route: r.join.Route, Status: status, Reason: reason(answer)}
}

func (r *Registration) call(ctx context.Context, method, target string, body []byte) (int, map[string]any, error) {
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, reader)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.join.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, &unreachableError{detail: "siding's control API cannot be reached: " + describe(err)}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	answer := map[string]any{}
	if err := json.Unmarshal(raw, &answer); err != nil && len(raw) > 0 {
		answer = map[string]any{"error": string(raw[:min(len(raw), 200)])}
	}
	if resp.StatusCode >= 500 {
		return 0, nil, &unreachableError{status: resp.StatusCode, detail: fmt.Sprintf("siding answered %d: %s", resp.StatusCode, reason(answer))}
	}
	return resp.StatusCode, answer, nil
}

func (r *Registration) event(kind EventKind, status int, detail, consumer string) {
	if consumer == "" {
		consumer = r.Consumer()
	}
	e := RegistrationEvent{Kind: kind, Route: r.join.Route, Consumer: consumer, Status: status, Detail: detail}
	level := slog.LevelWarn
	if kind == EventJoined || kind == EventLeft {
		level = slog.LevelInfo
	}
	r.logger.Log(context.Background(), level, "siding registration "+string(kind),
		"route", e.Route, "consumer", e.Consumer, "status", e.Status, "detail", e.Detail)
	if r.join.OnEvent != nil {
		r.join.OnEvent(e)
	}
}

func reason(answer map[string]any) string {
	if text, ok := answer["error"].(string); ok {
		return text
	}
	raw, _ := json.Marshal(answer)
	return string(raw)
}

// describe is a connection error without the URL (which holds no secret, but is noise).
func describe(err error) string {
	var u *url.Error
	if errors.As(err, &u) {
		return u.Err.Error()
	}
	return err.Error()
}
