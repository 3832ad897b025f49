package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
)

// decodeBody decodes the request body, one JSON object of at most
// MaxBodyBytes, into dst, a pointer to a struct whose fields have json tags.
// It is stricter than encoding/json, which takes the last of duplicate keys
// and matches field names in any case: {"quantity":1,"quantity":5} would
// reserve 5 units and {"QUANTITY":5} would count as quantity. Here both are a
// 400, as are unknown fields and data after the object; a body that is not
// application/json is a 415. The messages name JSON fields and JSON kinds of
// value, never a Go type.
func decodeBody(w http.ResponseWriter, r *http.Request, dst any) error {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return errorf(http.StatusUnsupportedMediaType, codeUnsupportedType, "Content-Type must be application/json")
	}
	raw, err := readBody(w, r)
	if err != nil {
		return err
	}
	if err := checkObject(raw, jsonFields(dst)); err != nil {
		return err
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return errorf(http.StatusBadRequest, codeInvalidBody, "%s must be %s, not %s", te.Field, jsonKind(te.Type), te.Value)
		}
		return errorf(http.StatusBadRequest, codeInvalidBody, "the body is not the expected JSON object")
	}
	return nil
}

// readBody reads the whole body, at most MaxBodyBytes, first: a body over
// the limit is a 413 whatever JSON error the decoder would have hit first. A
// body that stops short is the client's doing, never a 500: the client sent
// too slowly for the server's read timeout (408), closed the connection
// (499, as for any request whose client left), or ended the body early some
// other way (400).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err == nil {
		return raw, nil
	}
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		return nil, errorf(http.StatusRequestEntityTooLarge, codeBodyTooLarge, "the body is larger than %d bytes", MaxBodyBytes)
	case errors.As(err, &ne) && ne.Timeout():
		return nil, errorf(http.StatusRequestTimeout, codeRequestTimeout, "the body did not arrive within the server's read timeout")
	case r.Context().Err() != nil:
		// net/http cancels the request once the connection ended.
		return nil, r.Context().Err()
	}
	return nil, errorf(http.StatusBadRequest, codeIncompleteBody, "the body ended before it was complete")
}

// checkObject checks that raw is one JSON object whose keys are all in
// fields, exactly as spelled, each at most once, with nothing after it.
func checkObject(raw []byte, fields []string) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	invalid := func(err error) error {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return errorf(http.StatusBadRequest, codeInvalidBody, "the body is not valid JSON: %v", err)
	}
	tok, err := dec.Token()
	if err != nil {
		return invalid(err)
	}
	if tok != json.Delim('{') {
		return errorf(http.StatusBadRequest, codeInvalidBody, "the body must be a JSON object")
	}
	seen := make([]bool, len(fields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return invalid(err)
		}
		key, _ := tok.(string) // inside an object, Token returns the keys as strings
		i := slices.Index(fields, key)
		switch {
		case i < 0:
			if j := slices.IndexFunc(fields, func(f string) bool { return strings.EqualFold(f, key) }); j >= 0 {
				return errorf(http.StatusBadRequest, codeUnknownField, "unknown field %q: field names are case-sensitive, did you mean %q?", key, fields[j])
			}
			return errorf(http.StatusBadRequest, codeUnknownField, "unknown field %q", key)
		case seen[i]:
			return errorf(http.StatusBadRequest, codeDuplicateField, "field %q is given more than once", key)
		}
		seen[i] = true
		if err := skipValue(dec); err != nil {
			return invalid(err)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return invalid(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errorf(http.StatusBadRequest, codeInvalidBody, "the body has data after the JSON object")
	}
	return nil
}

// skipValue reads one value, however deeply nested. Only its syntax
// matters here: json.Unmarshal refuses a value of the wrong kind later.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// jsonFields lists the JSON names of the struct dst points to.
func jsonFields(dst any) []string {
	t := reflect.TypeOf(dst).Elem()
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// jsonKind names the kind of JSON value a Go type takes, for messages that
// must not name the Go type.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer within 64 bits"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}
