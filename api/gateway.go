package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/flexkv/flexkv/api/apipb"
)

// The HTTP/JSON gateway of the client API (DESIGN 7). Its routes and
// handlers are grpc-gateway's, generated from kv.proto and
// kv_gateway.yaml (apipb.RegisterKVHandler); what this file adds is what
// FlexKV's users see differently from grpc-gateway's defaults:
//
//   - Keys and values are UTF-8 text. protojson writes a bytes field as
//     base64 (etcd's gateway does the same, and its users ask for text):
//     here a JSON object's bytes fields are strings of their bytes when every
//     one of them is UTF-8, and base64 with "encoding":"base64" in that
//     object otherwise. A request may send "encoding":"base64" too, for the
//     bytes fields of the object it is in (not of the objects inside it).
//     In a path (/v1/kv/{key}) and a query (start, end), the key is the
//     text itself, percent-encoded as URLs are; ?encoding=base64 reads them
//     as base64 instead.
//   - Errors are JSON objects with the gRPC code, its name and the message,
//     {"code":3,"status":"INVALID_ARGUMENT","message":"..."}, under the HTTP
//     status of the code (grpc-gateway's table: 400, 404, 409, 429, 503,
//     ...); an unknown route is 404 and a known one with another method 405,
//     with the routes named.
//   - No HTTP header becomes gRPC metadata: the user a call is made for is
//     the gateway's to name (Gateway's user), never the caller's.

// GatewayBodyBytesMax bounds the body of one HTTP request: the largest
// gRPC request the client API takes (4 MiB), and its JSON around it (base64
// makes bytes a third larger).
const GatewayBodyBytesMax = 6 << 20

// encodingField is the JSON member that says an object's bytes fields are
// base64, and encodingParam the query parameter that says it of a path's
// and a query's keys.
const (
	encodingField = "encoding"
	encodingParam = "encoding"
	encodingB64   = "base64"
)

// GatewayConfig configures Gateway.
type GatewayConfig struct {
	// Conn is the connection to the client API the gateway calls: a
	// replica's own, over the network or in process.
	Conn grpc.ClientConnInterface
	// User returns the user an HTTP request is made for (the CN of its
	// client certificate), sent with each call in apipb.UserHeader; an
	// error refuses the request, Unauthenticated (401), before any call.
	// Nil: no user is named (a cluster without TLS).
	User func(*http.Request) (string, error)
}

// Gateway returns the HTTP handler of the client API's routes
// (kv_gateway.yaml), each a call on cfg.Conn.
func Gateway(cfg GatewayConfig) (http.Handler, error) {
	if cfg.Conn == nil {
		return nil, errors.New("api: gateway: no connection to the client API")
	}
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, textJSON{}),
		runtime.WithErrorHandler(writeGatewayError),
		runtime.WithRoutingErrorHandler(writeRoutingError),
		runtime.WithIncomingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithMetadata(func(ctx context.Context, _ *http.Request) metadata.MD {
			if user, ok := ctx.Value(gatewayUserKey{}).(string); ok {
				return metadata.Pairs(apipb.UserHeader, user)
			}
			return nil
		}),
		runtime.WithMiddlewares(textParams),
	)
	if err := apipb.RegisterKVHandlerClient(context.Background(), mux, apipb.NewKVClient(cfg.Conn)); err != nil {
		return nil, fmt.Errorf("api: gateway: %w", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cfg.User != nil {
			user, err := cfg.User(r)
			if err != nil {
				writeJSONError(w, http.StatusUnauthorized, status.New(codes.Unauthenticated, err.Error()))
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), gatewayUserKey{}, user))
		}
		r.Body = http.MaxBytesReader(w, r.Body, GatewayBodyBytesMax)
		mux.ServeHTTP(w, r)
	}), nil
}

type gatewayUserKey struct{}

// gatewayRoutes names the routes in errors, as kv_gateway.yaml has them.
const gatewayRoutes = "POST /v1/txn, GET|PUT|DELETE /v1/kv/{key}, GET /v1/scan?start=&end=, POST /v1/await, POST /v1/session, GET /v1/topology, GET /v1/status"

// textParams turns the text keys of a path and a query into the base64
// that grpc-gateway reads bytes fields from (runtime.Bytes): the key of
// /v1/kv/{key} is the rest of the path, percent-decoded, and start and end
// (and key) in a query are their text; with ?encoding=base64 they are
// base64 already.
func textParams(next runtime.HandlerFunc) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		q := r.URL.Query()
		b64 := false
		if e, ok := q[encodingParam]; ok {
			if len(e) != 1 || e[0] != encodingB64 {
				writeJSONError(w, http.StatusBadRequest, status.Newf(codes.InvalidArgument, "api: query parameter %s=%q, want %s (or none: keys are text)", encodingParam, strings.Join(e, ","), encodingB64))
				return
			}
			b64 = true
			q.Del(encodingParam)
		}
		if _, ok := params["key"]; ok && !b64 {
			rest, _ := strings.CutPrefix(r.URL.EscapedPath(), "/v1/kv/")
			key, err := url.PathUnescape(rest)
			if err != nil {
				writeJSONError(w, http.StatusBadRequest, status.Newf(codes.InvalidArgument, "api: key %q in the path: %v", rest, err))
				return
			}
			params["key"] = base64.StdEncoding.EncodeToString([]byte(key))
		}
		if !b64 {
			for _, name := range []string{"key", "start", "end"} {
				for i, v := range q[name] {
					q[name][i] = base64.StdEncoding.EncodeToString([]byte(v))
				}
			}
		}
		r.URL.RawQuery = q.Encode()
		next(w, r, params)
	}
}

// textJSON is the gateway's runtime.Marshaler: protojson, with the proto
// field names (client_id, next_start), every field written (found: false
// included), and bytes fields as text (see the top of this file).
type textJSON struct{}

var (
	gatewayMarshal   = protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true}
	gatewayUnmarshal = protojson.UnmarshalOptions{}
)

func (textJSON) ContentType(any) string { return "application/json" }

func (textJSON) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return json.Marshal(v)
	}
	raw, err := gatewayMarshal.Marshal(m)
	if err != nil {
		return nil, err
	}
	tree, err := decodeJSON(raw)
	if err != nil {
		return nil, err
	}
	toText(tree, m.ProtoReflect().Descriptor())
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(tree); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func (textJSON) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return json.Unmarshal(data, v)
	}
	tree, err := decodeJSON(data)
	if err != nil {
		return fmt.Errorf("api: malformed JSON: %w", err)
	}
	if err := fromText(tree, m.ProtoReflect().Descriptor(), "body"); err != nil {
		return err
	}
	raw, err := json.Marshal(tree)
	if err != nil {
		return err
	}
	return gatewayUnmarshal.Unmarshal(raw, m)
}

func (t textJSON) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(data)) == 0 {
			return io.EOF // no body: the request's fields stay zero
		}
		return t.Unmarshal(data, v)
	})
}

func (t textJSON) NewEncoder(w io.Writer) runtime.Encoder {
	return runtime.EncoderFunc(func(v any) error {
		data, err := t.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	})
}

// decodeJSON decodes one JSON value, numbers kept as written.
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

// field returns the field of md that a JSON object of md names, by its
// JSON name or its proto name, as protojson reads them, or nil.
func field(md protoreflect.MessageDescriptor, name string) protoreflect.FieldDescriptor {
	fields := md.Fields()
	if fd := fields.ByJSONName(name); fd != nil {
		return fd
	}
	return fields.ByName(protoreflect.Name(name))
}

// toText rewrites, in the protojson tree v of a message md, each object's
// bytes fields from base64 to text when every one is UTF-8, or marks the
// object "encoding":"base64" when one is not.
func toText(v any, md protoreflect.MessageDescriptor) {
	obj, ok := v.(map[string]any)
	if !ok {
		return
	}
	var decoded map[string]any
	text := true
	for name, val := range obj {
		fd := field(md, name)
		switch {
		case fd == nil || fd.IsMap():
		case fd.Kind() == protoreflect.MessageKind:
			each(val, func(e any) any { toText(e, fd.Message()); return e })
		case fd.Kind() == protoreflect.BytesKind:
			if decoded == nil {
				decoded = make(map[string]any)
			}
			if list, ok := val.([]any); ok {
				val = append([]any(nil), list...) // obj keeps its base64 if one is not text
			}
			decoded[name] = each(val, func(e any) any {
				s, _ := e.(string)
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil || !utf8.Valid(b) {
					text = false
					return e
				}
				return string(b)
			})
		}
	}
	if !text {
		obj[encodingField] = encodingB64
		return
	}
	for name, val := range decoded {
		obj[name] = val
	}
}

// fromText rewrites, in the JSON tree v of a request for a message md, the
// bytes fields of each object from text to the base64 protojson reads,
// unless the object says "encoding":"base64". where names the object in
// errors.
func fromText(v any, md protoreflect.MessageDescriptor, where string) error {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil // not an object: protojson says what is wrong
	}
	b64 := false
	if e, ok := obj[encodingField]; ok && field(md, encodingField) == nil {
		if e != encodingB64 {
			return fmt.Errorf("api: %s: \"encoding\": %v, want \"base64\" (or none: keys and values are text)", where, e)
		}
		b64 = true
		delete(obj, encodingField)
	}
	for name, val := range obj {
		fd := field(md, name)
		switch {
		case fd == nil || fd.IsMap():
		case fd.Kind() == protoreflect.MessageKind:
			var err error
			each(val, func(e any) any {
				if err == nil {
					err = fromText(e, fd.Message(), where+"."+name)
				}
				return e
			})
			if err != nil {
				return err
			}
		case fd.Kind() == protoreflect.BytesKind && !b64:
			obj[name] = each(val, func(e any) any {
				if s, ok := e.(string); ok {
					return base64.StdEncoding.EncodeToString([]byte(s))
				}
				return e
			})
		}
	}
	return nil
}

// each applies f to v, or to each element of v when it is a list, and
// returns the result.
func each(v any, f func(any) any) any {
	list, ok := v.([]any)
	if !ok {
		return f(v)
	}
	for i, e := range list {
		list[i] = f(e)
	}
	return list
}

// gatewayError is the JSON of an error: the gRPC code, its name, the
// message.
type gatewayError struct {
	Code    int    `json:"code"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

// codeName returns the name of c as gRPC's specification spells it:
// INVALID_ARGUMENT for codes.InvalidArgument.
func codeName(c codes.Code) string {
	name := c.String()
	if c == codes.OK {
		return "OK"
	}
	var b strings.Builder
	for i, r := range name {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

func writeJSONError(w http.ResponseWriter, httpStatus int, st *status.Status) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	enc := json.NewEncoder(w) // one line, with no HTML escapes
	enc.SetEscapeHTML(false)
	_ = enc.Encode(gatewayError{Code: int(st.Code()), Status: codeName(st.Code()), Message: st.Message()})
}

// WriteGatewayError writes err as the gateway writes its errors: JSON with
// the gRPC code, under the code's HTTP status.
func WriteGatewayError(w http.ResponseWriter, err error) {
	writeGatewayError(context.Background(), nil, nil, w, nil, err)
}

// writeGatewayError is the gateway's runtime.ErrorHandlerFunc: the error
// as JSON, under the HTTP status of its code.
func writeGatewayError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
	httpStatus := 0
	var hs *runtime.HTTPStatusError
	if errors.As(err, &hs) {
		httpStatus, err = hs.HTTPStatus, hs.Err
	}
	var tooLarge *http.MaxBytesError
	st := status.Convert(err)
	if errors.As(err, &tooLarge) || strings.Contains(st.Message(), "http: request body too large") {
		httpStatus = http.StatusRequestEntityTooLarge
		st = status.Newf(codes.InvalidArgument, "api: request body larger than %d bytes", GatewayBodyBytesMax)
	}
	if httpStatus == 0 {
		httpStatus = runtime.HTTPStatusFromCode(st.Code())
	}
	writeJSONError(w, httpStatus, st)
}

// writeRoutingError is the gateway's runtime.RoutingErrorHandlerFunc: a
// path that no route has is 404, a route's path with another method 405.
func writeRoutingError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	code := codes.InvalidArgument
	switch httpStatus {
	case http.StatusNotFound:
		code = codes.NotFound
	case http.StatusMethodNotAllowed:
		code = codes.Unimplemented
	}
	writeJSONError(w, httpStatus, status.Newf(code, "api: no route %s %s (%s); the routes: %s", r.Method, r.URL.Path, http.StatusText(httpStatus), gatewayRoutes))
}
