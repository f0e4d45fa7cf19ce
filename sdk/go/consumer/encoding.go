package consumer

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// A BodyError is a webhook body that cannot be decoded; Status is the answer it deserves
// (415: an encoding this package does not decode, 400: a broken gzip stream, 413: too large
// once decoded).
type BodyError struct {
	Status int
	msg    string
}

func (e *BodyError) Error() string { return e.msg }

// DecodeBody returns a webhook body as siding signed it: gunzipped when the request's
// Content-Encoding is gzip (a route's compression), at most maxBytes once decoded, else body
// unchanged. siding signs the body before compressing it, so verify what this returns.
func DecodeBody(h http.Header, body []byte, maxBytes int64) ([]byte, error) {
	encoding := strings.ToLower(strings.TrimSpace(h.Get("Content-Encoding")))
	switch encoding {
	case "", "identity":
		return body, nil
	case "gzip":
	default:
		return nil, &BodyError{http.StatusUnsupportedMediaType, fmt.Sprintf("content-encoding %q is not supported (gzip is)", encoding)}
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return nil, &BodyError{http.StatusBadRequest, "the gzip body does not decode: " + err.Error()}
	}
	zr.Multistream(false)
	decoded, err := io.ReadAll(io.LimitReader(zr, maxBytes+1))
	if int64(len(decoded)) > maxBytes {
		return nil, &BodyError{http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes decoded", maxBytes)}
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, &BodyError{http.StatusBadRequest, "the gzip body is cut short"}
		}
		return nil, &BodyError{http.StatusBadRequest, "the gzip body does not decode: " + err.Error()}
	}
	return decoded, nil
}
