package consumer

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/siding-dev/siding/sdk/go/sidingv1"
)

var jsonValue = bytes.Repeat([]byte(`{"sku": "SKU-0001", "qty": 1, "price": "19.99"}, `), 80)

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}

// The gzip compressor is registered by this package itself (server.go), not by this test: a
// gzip call would fail with "Compressor is not installed" without it.
func TestTheServerTakesGzipCalls(t *testing.T) {
	client, _, _ := serve(t, byKey)
	r, err := client.Deliver(context.Background(), delivery(1, "echo", jsonValue), grpc.UseCompressor("gzip"))
	if err != nil {
		t.Fatal(err)
	}
	if out := r.GetOutputs(); r.GetVerdict() != sidingv1.Verdict_VERDICT_ACK || len(out) != 1 || !bytes.Equal(out[0].GetValue(), jsonValue) {
		t.Fatalf("got %v", r)
	}
}

func TestAGzipWebhookIsDecodedThenVerifiedAndHandled(t *testing.T) {
	h, seen := recording(byKey)
	srv := webhookServer(t, h)
	header := http.Header{"Ce-Id": {"t/0/1"}, "Webhook-Id": {"t/0/1"}, "Content-Encoding": {"gzip"}}
	// siding signs the body before compressing it
	status, _, answer := postSigned(t, srv.URL, header, gzipped(jsonValue), jsonValue)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, answer)
	}
	if d := <-seen; !bytes.Equal(d.Value, jsonValue) {
		t.Fatalf("value %q", d.Value)
	}
}

func TestDecodeBody(t *testing.T) {
	tests := []struct {
		name     string
		encoding string
		body     []byte
		status   int
		fragment string
	}{
		{"plain", "", jsonValue, 0, ""},
		{"gzip", "GZIP", gzipped(jsonValue), 0, ""},
		{"unknown", "br", []byte("x"), 415, `"br" is not supported`},
		{"broken", "gzip", []byte("not gzip"), 400, "does not decode"},
		{"truncated", "gzip", gzipped(jsonValue)[:40], 400, "cut short"},
		{"bomb", "gzip", gzipped(make([]byte, 100_000)), 413, "larger than 65536 bytes decoded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.encoding != "" {
				h.Set("Content-Encoding", tt.encoding)
			}
			got, err := DecodeBody(h, tt.body, 65536)
			if tt.status == 0 {
				if err != nil || !bytes.Equal(got, jsonValue) {
					t.Fatalf("got %d bytes, %v", len(got), err)
				}
				return
			}
			var bad *BodyError
			if !errors.As(err, &bad) || bad.Status != tt.status || !strings.Contains(bad.Error(), tt.fragment) {
				t.Fatalf("got %v", err)
			}
		})
	}
}

// postSigned posts body with a signature over signed (what siding signs: the body before it
// was compressed).
func postSigned(t *testing.T, url string, header http.Header, body, signed []byte) (int, http.Header, []byte) {
	t.Helper()
	key, _ := SecretKey(secret)
	now := time.Now().Unix()
	h := header.Clone()
	h.Set("webhook-timestamp", strconv.FormatInt(now, 10))
	h.Set("webhook-signature", Sign(key, h.Get("webhook-id"), now, signed))
	return post(t, url, h, body, false)
}
