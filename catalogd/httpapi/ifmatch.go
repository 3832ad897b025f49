package httpapi

import (
	"net/http"
	"slices"
	"strconv"
)

// ifMatch is a parsed If-Match header (RFC 9110 section 13.1.1).
type ifMatch struct {
	present bool
	any     bool // "*"
	// versions are the versions the strong tags name. The other tags can
	// never match and are dropped: weak tags, since If-Match compares
	// strongly, and strong tags that are not an ETag this API sends (a
	// quoted decimal version without sign or leading zero: "+2" and "02"
	// are other tags than "2").
	versions []int64
}

var errIfMatchSyntax = errorf(http.StatusBadRequest, codeInvalidIfMatch,
	`If-Match must be "*" or a list of entity tags, like "3" (RFC 9110)`)

// parseIfMatch parses the If-Match field lines of h: "*" or a comma-separated
// list of entity tags, each an optional W/ and a quoted string of etagc
// characters. Empty list elements are allowed, as the RFC's list rule says.
func parseIfMatch(h http.Header) (ifMatch, error) {
	lines := h.Values("If-Match")
	m := ifMatch{present: len(lines) > 0}
	if len(lines) == 1 && trimOWS(lines[0]) == "*" {
		m.any = true
		return m, nil
	}
	tags := 0
	for _, line := range lines {
		s := line
		for {
			s = trimOWS(s)
			if s == "" {
				break
			}
			if s[0] == ',' {
				s = s[1:]
				continue
			}
			weak := len(s) >= 2 && s[:2] == "W/"
			if weak {
				s = s[2:]
			}
			opaque, rest, ok := quoted(s)
			if !ok {
				return m, errIfMatchSyntax
			}
			if s = trimOWS(rest); s != "" && s[0] != ',' {
				return m, errIfMatchSyntax
			}
			tags++
			if v, err := strconv.ParseInt(opaque, 10, 64); !weak && err == nil && v >= 1 && strconv.FormatInt(v, 10) == opaque {
				m.versions = append(m.versions, v)
			}
		}
	}
	if m.present && tags == 0 {
		return m, errIfMatchSyntax
	}
	return m, nil
}

// quoted reads an opaque-tag's DQUOTE *etagc DQUOTE from the start of s,
// where etagc is %x21 / %x23-7E / obs-text.
func quoted(s string) (opaque, rest string, ok bool) {
	if s == "" || s[0] != '"' {
		return "", "", false
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return s[1:i], s[i+1:], true
		case c == 0x21, c >= 0x23 && c <= 0x7e, c >= 0x80:
		default:
			return "", "", false
		}
	}
	return "", "", false
}

func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// expectedVersions picks the versions an update may apply to, from If-Match
// and the body's "version". Both given must agree. Neither is a 428, and so
// is "*": it names no version, and an update must say which one it read. A
// header whose tags can none of them match is a 412, as RFC 9110 has it for
// a false If-Match. More than one version is returned only for a list of
// tags; the caller then compares them with the current version.
func expectedVersions(m ifMatch, body *int64) ([]int64, error) {
	if body != nil && *body < 1 {
		return nil, errorf(http.StatusBadRequest, codeInvalidInput, "version must be positive")
	}
	switch {
	case m.any && body == nil:
		return nil, errorf(http.StatusPreconditionRequired, codeVersionRequired, `If-Match: * names no version; send the version you read, as If-Match: "<version>"`)
	case m.any:
		return []int64{*body}, nil
	case !m.present && body == nil:
		return nil, errorf(http.StatusPreconditionRequired, codeVersionRequired, `send the version you read, as If-Match: "<version>" or a "version" field`)
	case !m.present:
		return []int64{*body}, nil
	case len(m.versions) == 0:
		return nil, errorf(http.StatusPreconditionFailed, codePreconditionFailed,
			`If-Match names no version of this product: its ETag is the version in quotes, like "3", and a weak tag (W/) never matches If-Match`)
	case body != nil && !slices.Contains(m.versions, *body):
		return nil, errorf(http.StatusBadRequest, codeInvalidIfMatch, "If-Match and version %d disagree", *body)
	case body != nil:
		return []int64{*body}, nil
	}
	return m.versions, nil
}
