package consumer

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

// Vectors made by siding's own signer (sdk/python, siding_consumer.signing) and, for the first,
// the reference Standard Webhooks library: the Go SDK must agree byte for byte.
var vectors = []struct {
	secret, id string
	timestamp  int64
	body       []byte
	signature  string
}{
	{"whsec_c3Nzc3Nzc3Nzc3Nzc3Nzc3Nzc3Nzc3Nzc3Nzc3Nzc3M=", "trips/3/42", 1700000000, []byte(`{"fare": 12.5}`), "v1,6wN3h3ztQkgFU4mUfnOerqev24QgMLWR0LlsVyvqJv0="},
	{"plain-secret", "batch:orders/0/42:3", 1700000000, []byte{0x00, 0xff}, "v1,CwoIHvOB0q9F6f543C3Okpf8GIZwgUx8cwUK0fAaxEQ="},
}

func TestSignMatchesSidingsSigner(t *testing.T) {
	for _, v := range vectors {
		key, err := SecretKey(v.secret)
		if err != nil {
			t.Fatal(err)
		}
		if got := Sign(key, v.id, v.timestamp, v.body); got != v.signature {
			t.Errorf("Sign(%q) = %s, want %s", v.id, got, v.signature)
		}
	}
}

func headers(id, timestamp, signature string) http.Header {
	h := http.Header{}
	for name, value := range map[string]string{"webhook-id": id, "webhook-timestamp": timestamp, "webhook-signature": signature} {
		if value != "" {
			h.Set(name, value)
		}
	}
	return h
}

func TestVerify(t *testing.T) {
	v := vectors[0]
	key, _ := SecretKey(v.secret)
	at := time.Unix(v.timestamp, 0)
	tests := []struct {
		name    string
		header  http.Header
		body    []byte
		now     time.Time
		wantErr error
	}{
		{"good", headers(v.id, "1700000000", v.signature), v.body, at, nil},
		{"one of several signatures", headers(v.id, "1700000000", "v1a,xyz v1,AAAA "+v.signature), v.body, at, nil},
		{"body changed", headers(v.id, "1700000000", v.signature), []byte(`{"fare": 99}`), at, ErrBadSignature},
		{"id changed", headers("trips/3/43", "1700000000", v.signature), v.body, at, ErrBadSignature},
		{"missing signature", headers(v.id, "1700000000", ""), v.body, at, ErrMissingHeader},
		{"timestamp not digits", headers(v.id, "1.7e9", v.signature), v.body, at, ErrBadTimestamp},
		{"signed with a sign", headers(v.id, "+1700000000", v.signature), v.body, at, ErrBadTimestamp},
		{"stale", headers(v.id, "1700000000", v.signature), v.body, at.Add(6 * time.Minute), ErrStaleTimestamp},
		{"future", headers(v.id, "1700000000", v.signature), v.body, at.Add(-6 * time.Minute), ErrFutureTimestamp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := Verify(key, tt.header, tt.body, tt.now, DefaultTolerance)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Verify() error = %v, want %v", err, tt.wantErr)
			}
			if err == nil && id != v.id {
				t.Errorf("Verify() id = %q, want %q", id, v.id)
			}
		})
	}
}

func TestSecretKey(t *testing.T) {
	tests := []struct {
		secret  string
		want    string
		wantErr bool
	}{
		{"plain", "plain", false},
		{"whsec_c3Nz", "sss", false},
		{"whsec_c3Nzcw", "ssss", false}, // padding may be left out
		{"whsec_%%%", "", true},
		{"", "", true},
		{"whsec_", "", true},
	}
	for _, tt := range tests {
		key, err := SecretKey(tt.secret)
		if (err != nil) != tt.wantErr || string(key) != tt.want {
			t.Errorf("SecretKey(%q) = %q, %v", tt.secret, key, err)
		}
		if err != nil && !errors.Is(err, ErrBadSecret) {
			t.Errorf("SecretKey(%q) error %v is not ErrBadSecret", tt.secret, err)
		}
	}
}
