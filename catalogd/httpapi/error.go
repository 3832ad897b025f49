package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/catalogd/catalog"
	"github.com/holdfast-dev/holdfast/catalogd/internal/ratelog"
)

// The codes of JSON error bodies. Clients branch on the code, never on the
// message, so codes only ever get added.
const (
	codeInvalidID          = "invalid_id"
	codeInvalidQuery       = "invalid_query"
	codeQueryTooLong       = "query_too_long"
	codeInvalidBody        = "invalid_body"
	codeUnknownField       = "unknown_field"
	codeDuplicateField     = "duplicate_field"
	codeIncompleteBody     = "incomplete_body"
	codeRequestTimeout     = "request_timeout"
	codePreconditionFailed = "precondition_failed"
	codeUnavailable        = "unavailable"
	codeMissingField       = "missing_field"
	codeBodyTooLarge       = "body_too_large"
	codeUnsupportedType    = "unsupported_media_type"
	codeInvalidInput       = "invalid_input"
	codeInvalidIfMatch     = "invalid_if_match"
	codeVersionRequired    = "version_required"
	codeNotFound           = "not_found"
	codeNoRoute            = "no_route"
	codeMethodNotAllowed   = "method_not_allowed"
	codeVersionConflict    = "version_conflict"
	codeInsufficientStock  = "insufficient_stock"
	codeOverloaded         = "overloaded"
	codeTimeout            = "timeout"
	codeClientClosed       = "client_closed_request"
	codeInternal           = "internal"
)

// statusClientClosed is nginx's 499: the client left before the answer. It
// only ever reaches the metrics and the log; the client is gone.
const statusClientClosed = 499

// apiError is an error whose status, code and message are meant for the
// client: bad input found by this package.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// errorStatus maps an error to the HTTP status, code and message the client
// sees. It is the only place where the error kinds of catalog and holdfast
// meet HTTP. Messages of unexpected errors are not passed on: they name
// tables, files and hosts.
func errorStatus(err error) (status int, code, message string) {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae.status, ae.code, ae.message
	case errors.Is(err, holdfast.ErrNotFound), errors.Is(err, catalog.ErrNotFound):
		return http.StatusNotFound, codeNotFound, "no such product"
	case errors.Is(err, catalog.ErrConflict):
		return http.StatusConflict, codeVersionConflict, "the product changed underneath the request; read it again and retry"
	case errors.Is(err, catalog.ErrInsufficientStock):
		return http.StatusConflict, codeInsufficientStock, "not enough stock"
	case errors.Is(err, catalog.ErrInvalid):
		// Input is validated here before it reaches a store, so this is
		// a store's own check: say what kind, not the store's wording.
		return http.StatusBadRequest, codeInvalidInput, "invalid input"
	case errors.Is(err, holdfast.ErrOverloaded):
		return http.StatusServiceUnavailable, codeOverloaded, "the service is at its database load limit and has no cached copy to serve; retry later"
	case errors.Is(err, holdfast.ErrTooLarge):
		return http.StatusBadRequest, codeInvalidInput, "input too large"
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, codeTimeout, "the database did not answer in time"
	case errors.Is(err, context.Canceled):
		return statusClientClosed, codeClientClosed, "the request was cancelled"
	case unreachable(err):
		return http.StatusServiceUnavailable, codeUnavailable, "the database cannot be reached and there is no cached copy to serve; retry later"
	}
	return http.StatusInternalServerError, codeInternal, "internal error"
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// rejectLogInterval is how often each kind of 503 is logged at most: a
// flood of them (one short flood made over 15,000) would otherwise bury
// every other line. Each line counts the 503s it stands for.
const rejectLogInterval = 10 * time.Second

// newRejectLogs returns a rate-limited log for each kind of 503, so that a
// flood of one kind does not hide the first of the other.
func newRejectLogs(log *slog.Logger) map[string]*ratelog.Logger {
	return map[string]*ratelog.Logger{
		codeOverloaded:  ratelog.New(log, slog.LevelWarn, "request rejected", rejectLogInterval),
		codeUnavailable: ratelog.New(log, slog.LevelWarn, "request rejected", rejectLogInterval),
	}
}

// writeError writes err as a JSON error body with its status. A 503 (an
// overload, which is the limiter doing its job, or a database that cannot
// be reached) is logged at warn, at most once per rejectLogInterval for
// each of the two with the count since the last line; other 5xx are logged
// at error level;
// 4xx are the client's business and are not logged beyond the request log.
// Logged errors are redacted: a driver's errors name the database's host,
// user and database.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, code, msg := errorStatus(err)
	switch {
	case status == http.StatusServiceUnavailable:
		// Built only for a line that is written: a flood of 503s would
		// otherwise run the redactions' regular expressions on each.
		attrs := func() []slog.Attr {
			return []slog.Attr{slog.String("code", code), slog.String("method", r.Method),
				slog.String("path", r.URL.Path), slog.String("error", redact(err.Error()))}
		}
		if l := h.rejects[code]; l != nil {
			l.LogFunc(r.Context(), attrs)
		} else {
			h.log.LogAttrs(r.Context(), slog.LevelWarn, "request rejected", attrs()...)
		}
	case status >= 500:
		h.log.LogAttrs(r.Context(), slog.LevelError, "request failed", slog.String("method", r.Method),
			slog.String("path", r.URL.Path), slog.Int("status", status), slog.String("error", redact(err.Error())))
	}
	var body errorBody
	body.Error.Code, body.Error.Message = code, msg
	b, _ := json.Marshal(body) // two strings: cannot fail
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	hdr.Del("Content-Length")
	if status == http.StatusServiceUnavailable {
		hdr.Set("Retry-After", h.retryAfter)
	}
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
