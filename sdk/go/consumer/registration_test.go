package consumer

// Joining a route, against a real HTTP server on loopback that answers as siding's control API
// does (docs/registration.md, "The calls"): join, renew every lease/3, join again on 404, back
// off while siding is away, leave on stop, the token in every call and in no log.

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
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	joinToken = "s3cret-join-token"
	joinRoute = "orders"
	leaseS    = 0.3
)

type regCall struct {
	method, path, authorization string
	body                        map[string]any
}

// fakeSiding holds the registration calls of siding's control API in memory.
type fakeSiding struct {
	mu        sync.Mutex
	calls     []regCall
	consumers map[string]string // id -> address
	failing   int               // answer every call with this status
	n         int
	srv       *httptest.Server
}

func newFakeSiding(t *testing.T) *fakeSiding {
	t.Helper()
	f := &fakeSiding{consumers: map[string]string{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		c := regCall{method: r.Method, path: r.URL.Path, authorization: r.Header.Get("Authorization")}
		if len(raw) > 0 {
			_ = json.Unmarshal(raw, &c.body)
		}
		status, answer := f.answer(c)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(answer)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeSiding) answer(c regCall) (int, map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	if f.failing != 0 {
		return f.failing, map[string]any{"error": "siding is busy"}
	}
	if c.authorization == "" {
		return 401, map[string]any{"error": "a bearer token is needed"}
	}
	parts := strings.Split(strings.Trim(c.path, "/"), "/")
	if len(parts) < 3 || parts[0] != "routes" || parts[1] != joinRoute || parts[2] != "consumers" {
		return 404, map[string]any{"error": "no such route: " + parts[1]}
	}
	if c.authorization != "Bearer "+joinToken {
		return 403, map[string]any{"error": "wrong token"}
	}
	rest := parts[3:]
	lease := func(id string) map[string]any {
		return map[string]any{"consumer": id, "address": f.consumers[id], "capacity": 100, "route": joinRoute, "lease_s": leaseS}
	}
	switch {
	case len(rest) == 0 && c.method == http.MethodPost:
		address, _ := c.body["address"].(string)
		if !strings.Contains(address, ":") {
			return 400, map[string]any{"error": fmt.Sprintf("address: '%s' has no port", address)}
		}
		for id, a := range f.consumers {
			if a == address {
				return 200, lease(id)
			}
		}
		f.n++
		id := fmt.Sprintf("c%d", f.n)
		f.consumers[id] = address
		return 201, lease(id)
	case len(rest) == 1 && f.consumers[rest[0]] == "":
		return 404, map[string]any{"error": "no consumer " + rest[0] + ": join again"}
	case len(rest) == 1 && c.method == http.MethodPut:
		return 200, lease(rest[0])
	case len(rest) == 1 && c.method == http.MethodDelete:
		delete(f.consumers, rest[0])
		return 200, map[string]any{"left": rest[0], "route": joinRoute}
	}
	return 404, map[string]any{"error": "no such call"}
}

func (f *fakeSiding) of(method string) []regCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []regCall
	for _, c := range f.calls {
		if c.method == method {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakeSiding) set(failing int) {
	f.mu.Lock()
	f.failing = failing
	f.mu.Unlock()
}

func (f *fakeSiding) members() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for k, v := range f.consumers {
		out[k] = v
	}
	return out
}

// events collects a registration's events (OnEvent runs on the renewing goroutine).
type events struct {
	mu   sync.Mutex
	list []RegistrationEvent
}

func (e *events) add(ev RegistrationEvent) {
	e.mu.Lock()
	e.list = append(e.list, ev)
	e.mu.Unlock()
}

func (e *events) kinds() []EventKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []EventKind
	for _, ev := range e.list {
		out = append(out, ev.Kind)
	}
	return out
}

func (e *events) count(kind EventKind) int {
	n := 0
	for _, k := range e.kinds() {
		if k == kind {
			n++
		}
	}
	return n
}

func eventually(t *testing.T, what string, check func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !check() {
		if time.Now().After(deadline) {
			t.Fatalf("not reached in time: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestRegistrationRules(t *testing.T) {
	if got := RenewEvery(15 * time.Second); got != 5*time.Second {
		t.Fatalf("RenewEvery(15s) = %v", got)
	}
	for failures, want := range map[int]time.Duration{1: 500 * time.Millisecond, 2: time.Second, 3: 2 * time.Second, 4: 4 * time.Second, 5: 5 * time.Second, 40: 5 * time.Second} {
		if got := RetryAfter(failures, 5*time.Second); got != want {
			t.Errorf("RetryAfter(%d, 5s) = %v, want %v", failures, got, want)
		}
	}
	if got := Advertised(&net.TCPAddr{IP: net.ParseIP("10.0.0.5"), Port: 50051}); got != "10.0.0.5:50051" {
		t.Errorf("Advertised = %s", got)
	}
	if got := Advertised(&net.TCPAddr{IP: net.IPv4zero, Port: 50051}); strings.HasPrefix(got, "0.0.0.0") || !strings.HasSuffix(got, ":50051") {
		t.Errorf("Advertised(0.0.0.0) = %s", got)
	}
	if s := fmt.Sprint(Join{ControlURL: "http://x", Route: joinRoute, Token: joinToken}); strings.Contains(s, joinToken) {
		t.Errorf("a Join prints its token: %s", s)
	}
}

func TestTheJoinBodiesAreTheSharedVectors(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/join-requests.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors struct {
		Cases []struct {
			Address   string         `json:"address"`
			Transport *string        `json:"transport"`
			Capacity  *int           `json:"capacity"`
			Body      map[string]any `json:"body"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &vectors); err != nil || len(vectors.Cases) == 0 {
		t.Fatalf("vectors: %v", err)
	}
	for _, c := range vectors.Cases {
		j := Join{Address: c.Address}
		if c.Transport != nil {
			j.Transport = *c.Transport
		}
		if c.Capacity != nil {
			j.Capacity = *c.Capacity
		}
		got, _ := json.Marshal(joinBody(j))
		want, _ := json.Marshal(c.Body)
		if string(got) != string(want) {
			t.Errorf("join body %s, want %s", got, want)
		}
	}
}

func TestRegisterJoinsRenewsEveryThirdOfTheLeaseAndLeaves(t *testing.T) {
	f := newFakeSiding(t)
	var ev events
	reg, err := Register(context.Background(), Join{
		ControlURL: f.srv.URL, Route: joinRoute, Token: joinToken, Address: "127.0.0.1:8080/hook",
		Transport: "http", Capacity: 50, OnEvent: ev.add, Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	id := reg.Consumer()
	if got := f.members(); !reflect.DeepEqual(got, map[string]string{id: "127.0.0.1:8080/hook"}) {
		t.Fatalf("members %v", got)
	}
	started := time.Now()
	eventually(t, "three renewals", func() bool { return len(f.of(http.MethodPut)) >= 3 })
	if elapsed := time.Since(started); elapsed < 2*time.Duration(leaseS*float64(time.Second))/3 {
		t.Fatalf("renewed faster than every lease/3: 3 renewals in %v", elapsed)
	}
	if err := reg.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"address": "127.0.0.1:8080/hook", "transport": "http", "capacity": float64(50)}
	if got := f.of(http.MethodPost)[0].body; !reflect.DeepEqual(got, want) {
		t.Fatalf("join body %v", got)
	}
	for _, c := range f.calls {
		if c.authorization != "Bearer "+joinToken {
			t.Fatalf("a call without the token: %+v", c)
		}
		if c.method == http.MethodPut && c.path != "/routes/orders/consumers/"+id {
			t.Fatalf("renewed %s", c.path)
		}
	}
	if dels := f.of(http.MethodDelete); len(dels) != 1 || dels[0].path != "/routes/orders/consumers/"+id {
		t.Fatalf("leaves %+v", dels)
	}
	if len(f.members()) != 0 || !reflect.DeepEqual(ev.kinds(), []EventKind{EventJoined, EventLeft}) {
		t.Fatalf("members %v, events %v", f.members(), ev.kinds())
	}
	renewals := len(f.of(http.MethodPut))
	time.Sleep(time.Duration(leaseS * float64(time.Second)))
	if len(f.of(http.MethodPut)) != renewals {
		t.Fatal("renewing after Leave")
	}
}

func TestARenewalAnswered404JoinsAgain(t *testing.T) {
	f := newFakeSiding(t)
	var ev events
	reg, err := Register(context.Background(), Join{ControlURL: f.srv.URL, Route: joinRoute, Token: joinToken, Address: "127.0.0.1:50051", OnEvent: ev.add, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	first := reg.Consumer()
	f.mu.Lock()
	delete(f.consumers, first) // the lease lapsed, or an operator removed it
	f.mu.Unlock()
	eventually(t, "joined again", func() bool { id := reg.Consumer(); return id != "" && id != first })
	if _, ok := f.members()[reg.Consumer()]; !ok {
		t.Fatalf("members %v", f.members())
	}
	_ = reg.Leave(context.Background())
	if got := ev.kinds(); !reflect.DeepEqual(got, []EventKind{EventJoined, EventLapsed, EventJoined, EventLeft}) {
		t.Fatalf("events %v", got)
	}
	if lapsed := ev.list[1]; lapsed.Status != 404 || lapsed.Consumer != first {
		t.Fatalf("lapsed %+v", lapsed)
	}
}

func TestWhileSidingIsAwayItBacksOffAndKeepsItsLease(t *testing.T) {
	f := newFakeSiding(t)
	var ev events
	reg, err := Register(context.Background(), Join{ControlURL: f.srv.URL, Route: joinRoute, Token: joinToken, Address: "127.0.0.1:50051", OnEvent: ev.add, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	id := reg.Consumer()
	f.set(503)
	eventually(t, "three failures", func() bool { return ev.count(EventUnreachable) >= 3 })
	f.set(0)
	before := len(f.of(http.MethodPut))
	eventually(t, "a renewal again", func() bool { return len(f.of(http.MethodPut)) > before+1 })
	if reg.Consumer() != id {
		t.Fatalf("a new lease %s, not %s", reg.Consumer(), id)
	}
	reg.Close() // no leave: the lease lapses
	if len(f.of(http.MethodDelete)) != 0 {
		t.Fatal("Close left the route")
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, e := range ev.list {
		if e.Kind == EventUnreachable && (e.Status != 503 || !strings.Contains(e.Detail, "siding is busy")) {
			t.Fatalf("unreachable %+v", e)
		}
	}
}

func TestSidingNotThereAtStartDoesNotStopTheService(t *testing.T) {
	f := newFakeSiding(t)
	f.set(502)
	var ev events
	reg, err := Register(context.Background(), Join{ControlURL: f.srv.URL, Route: joinRoute, Token: joinToken, Address: "127.0.0.1:50051", OnEvent: ev.add, Logger: quietLogger()})
	if err != nil || reg.Consumer() != "" || ev.kinds()[0] != EventUnreachable {
		t.Fatalf("err %v, consumer %q, events %v", err, reg.Consumer(), ev.kinds())
	}
	f.set(0)
	eventually(t, "joined", func() bool { return reg.Consumer() != "" })
	_ = reg.Leave(context.Background())
	if len(f.members()) != 0 {
		t.Fatalf("members %v", f.members())
	}

	var nobody events
	gone, err := Register(context.Background(), Join{ControlURL: "http://127.0.0.1:9", Route: joinRoute, Token: joinToken, Address: "h:1", OnEvent: nobody.add, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	gone.Close()
	if len(nobody.list) != 1 || nobody.list[0].Status != 0 || !strings.Contains(nobody.list[0].Detail, "cannot be reached") {
		t.Fatalf("events %+v", nobody.list)
	}
}

func TestARefusedFirstJoinIsAnError(t *testing.T) {
	f := newFakeSiding(t)
	for _, tc := range []struct {
		route, token, address string
		status                int
		reason                string
	}{
		{joinRoute, "wrong", "h:1", 403, "wrong token"},
		{"nope", joinToken, "h:1", 404, "no such route: nope"},
		{joinRoute, joinToken, "nohost", 400, "address: 'nohost' has no port"},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			_, err := Register(context.Background(), Join{ControlURL: f.srv.URL, Route: tc.route, Token: tc.token, Address: tc.address, Logger: quietLogger()})
			var refused *RegistrationError
			if !errors.As(err, &refused) || refused.Status != tc.status {
				t.Fatalf("err %v", err)
			}
			if want := fmt.Sprintf("joining route %s was refused (%d): %s", tc.route, tc.status, tc.reason); err.Error() != want {
				t.Fatalf("err %q, want %q", err, want)
			}
		})
	}
}

func TestTheTokenIsNeverLogged(t *testing.T) {
	f := newFakeSiding(t)
	var logged bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logged, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var ev events
	reg, err := Register(context.Background(), Join{ControlURL: f.srv.URL, Route: joinRoute, Token: joinToken, Address: "127.0.0.1:50051", OnEvent: ev.add, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	f.set(500)
	eventually(t, "a failure", func() bool { return ev.count(EventUnreachable) > 0 })
	f.set(0)
	_ = reg.Leave(context.Background())
	_, refused := Register(context.Background(), Join{ControlURL: f.srv.URL, Route: joinRoute, Token: joinToken + "x", Address: "h:1", Logger: logger})
	mu.Lock()
	text := logged.String() + fmt.Sprintf("%v %+v", refused, reg)
	mu.Unlock()
	if !strings.Contains(text, "joined") || !strings.Contains(text, "left") || !strings.Contains(text, "unreachable") {
		t.Fatalf("log %s", text)
	}
	if strings.Contains(text, joinToken) {
		t.Fatalf("the token is shown: %s", text)
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestTheServerJoinsOnceItListensAndLeavesWhenItStops(t *testing.T) {
	f := newFakeSiding(t)
	_, conn, stop := serve(t, byKey, WithJoin(Join{ControlURL: f.srv.URL, Route: joinRoute, Token: joinToken, Capacity: 7}), WithLogger(quietLogger()))
	eventually(t, "joined", func() bool { return len(f.members()) == 1 })
	want := map[string]any{"address": conn.Target(), "capacity": float64(7)}
	if got := f.of(http.MethodPost)[0].body; !reflect.DeepEqual(got, want) {
		t.Fatalf("join body %v, want %v", got, want)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if len(f.members()) != 0 || len(f.of(http.MethodDelete)) != 1 {
		t.Fatalf("members %v after stop", f.members())
	}
}
