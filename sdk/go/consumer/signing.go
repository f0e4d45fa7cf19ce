package consumer

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultTolerance is how far a webhook's timestamp may be from the receiver's clock.
const DefaultTolerance = 5 * time.Minute

const secretPrefix = "whsec_"

// Why a webhook request does not verify (errors.Is them).
var (
	ErrMissingHeader   = errors.New("missing header")
	ErrBadTimestamp    = errors.New("webhook-timestamp is not an integer")
	ErrStaleTimestamp  = errors.New("webhook-timestamp is too old")
	ErrFutureTimestamp = errors.New("webhook-timestamp is in the future")
	ErrBadSignature    = errors.New("no webhook-signature matches the body")
	ErrBadSecret       = errors.New("unusable webhook secret")
)

// SecretKey is the HMAC key behind a route's webhook secret: "whsec_<base64>" is the decoded
// bytes (the Standard Webhooks form), any other text its own bytes.
func SecretKey(secret string) ([]byte, error) {
	key := []byte(secret)
	if encoded, ok := strings.CutPrefix(secret, secretPrefix); ok {
		var err error
		key, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(encoded, "="))
		if err != nil {
			return nil, fmt.Errorf("%w: a whsec_ secret must be base64 after the prefix", ErrBadSecret)
		}
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("%w: the webhook secret must not be empty", ErrBadSecret)
	}
	return key, nil
}

// Sign is the webhook-signature value siding sends: "v1,<base64 HMAC-SHA256>" over
// "{id}.{timestamp}.{body}".
func Sign(key []byte, id string, timestamp int64, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(digest(key, id, strconv.FormatInt(timestamp, 10), body))
}

func digest(key []byte, id, timestamp string, body []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	return mac.Sum(nil)
}

// Verify checks a webhook's Standard Webhooks headers against its raw body, at time now, and
// returns its webhook-id. body must be the raw request body, byte for byte.
func Verify(key []byte, header http.Header, body []byte, now time.Time, tolerance time.Duration) (string, error) {
	id := header.Get("webhook-id")
	timestamp := strings.TrimSpace(header.Get("webhook-timestamp"))
	signatures := header.Get("webhook-signature")
	var missing []string
	for name, value := range map[string]string{"webhook-id": id, "webhook-timestamp": timestamp, "webhook-signature": signatures} {
		if value == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("%w: %s", ErrMissingHeader, strings.Join(missing, ", "))
	}
	// Digits only: a signed timestamp must not be able to absorb a '.' from the id or body.
	seconds, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil || len(timestamp) > 15 || strings.TrimLeft(timestamp, "0123456789") != "" {
		return "", ErrBadTimestamp
	}
	age := now.Sub(time.Unix(seconds, 0))
	if age > tolerance {
		return "", fmt.Errorf("%w: %s old (tolerance %s)", ErrStaleTimestamp, age.Round(time.Second), tolerance)
	}
	if -age > tolerance {
		return "", fmt.Errorf("%w: %s ahead (tolerance %s)", ErrFutureTimestamp, (-age).Round(time.Second), tolerance)
	}
	expected := digest(key, id, timestamp, body)
	matched := false
	for _, candidate := range strings.Fields(signatures) {
		version, encoded, _ := strings.Cut(candidate, ",")
		if version != "v1" {
			continue // other schemes are not ours to check
		}
		given, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil {
			continue
		}
		// No early exit: every candidate costs the same, whichever one matches.
		matched = hmac.Equal(expected, given) || matched
	}
	if !matched {
		return "", ErrBadSignature
	}
	return id, nil
}
