package api

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// schemaTypes are the types of types.go that have a schema of the same name
// in components.schemas. TestOpenAPITypesListed keeps this list complete.
var schemaTypes = []any{
	Sandbox{}, Resources{}, CreateSandboxRequest{}, File{}, SandboxList{},
	TimeoutRequest{}, ExecRequest{}, ExecResult{}, Process{}, ProcessList{},
	SignalRequest{}, OutputEvent{}, FileInfo{}, FileList{}, MkdirRequest{},
	RenameRequest{}, PTYStart{}, PTYControl{}, PTYSize{}, PTYExit{}, APIKey{},
	CreateKeyRequest{}, KeyList{}, Error{}, ErrorBody{}, NetworkEvent{}, NetworkEventsPage{},
	NetworkPolicy{}, HTTPRule{}, RecordEvent{}, RecordEventsPage{},
	CreateSnapshotRequest{}, Snapshot{}, SnapshotList{}, ForkRequest{}, ForkResult{}, RestoreRequest{},
	Changes{}, Change{},
}

// unauthenticated are the operations that need no API key.
var unauthenticated = []string{"health", "ready", "metrics", "openapi"}

var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func loadDoc(t *testing.T) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return doc
}

func obj(t *testing.T, v any, where string) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: want an object, have %T", where, v)
	}
	return m
}

// resolve follows a local JSON pointer ("#/components/...").
func resolve(doc map[string]any, ref string) (any, bool) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, false
	}
	var cur any = doc
	for _, tok := range strings.Split(ref[2:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[tok]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// deref resolves v if it is a {"$ref": ...} object.
func deref(t *testing.T, doc map[string]any, v any) map[string]any {
	t.Helper()
	m := obj(t, v, "reference")
	if ref, ok := m["$ref"].(string); ok {
		r, ok := resolve(doc, ref)
		if !ok {
			t.Fatalf("unresolved $ref %q", ref)
		}
		return obj(t, r, ref)
	}
	return m
}

type operation struct {
	method, path string
	item, op     map[string]any
}

func operations(t *testing.T, doc map[string]any) []operation {
	t.Helper()
	var ops []operation
	for path, item := range obj(t, doc["paths"], "paths") {
		item := obj(t, item, path)
		for _, m := range methods {
			if o, ok := item[m]; ok {
				ops = append(ops, operation{strings.ToUpper(m), path, item, obj(t, o, m+" "+path)})
			}
		}
	}
	return ops
}

func TestOpenAPIDocument(t *testing.T) {
	doc := loadDoc(t)
	if v := doc["openapi"]; v != "3.0.3" {
		t.Errorf("openapi = %v, want 3.0.3", v)
	}
	info := obj(t, doc["info"], "info")
	if info["title"] != "airlock API" || info["version"] != "1" {
		t.Errorf("info title/version = %v/%v", info["title"], info["version"])
	}
	if d, _ := info["description"].(string); !strings.Contains(d, "Authorization: Bearer <key>") {
		t.Errorf("info.description does not explain authentication")
	}
	servers, _ := doc["servers"].([]any)
	if len(servers) == 0 {
		t.Fatalf("no servers")
	}
	if u, _ := obj(t, servers[0], "servers[0]")["url"].(string); !strings.HasPrefix(u, "/") {
		t.Errorf("servers[0].url = %q, want a relative url", u)
	}
	comps := obj(t, doc["components"], "components")
	bearer := obj(t, obj(t, comps["securitySchemes"], "securitySchemes")["bearer"], "securitySchemes.bearer")
	if bearer["type"] != "http" || bearer["scheme"] != "bearer" {
		t.Errorf("securitySchemes.bearer = %v, want http bearer", bearer)
	}
	if !reflect.DeepEqual(doc["security"], []any{map[string]any{"bearer": []any{}}}) {
		t.Errorf("top-level security = %v, want [{bearer: []}]", doc["security"])
	}
}

func TestOpenAPIRoutes(t *testing.T) {
	doc := loadDoc(t)
	want := map[string]string{} // "METHOD path" -> op
	for _, r := range Routes {
		k := r.Method + " " + r.Path
		if _, dup := want[k]; dup {
			t.Errorf("Routes lists %s twice", k)
		}
		want[k] = r.Op
	}
	have := map[string]map[string]any{}
	ids := map[string]string{}
	for _, o := range operations(t, doc) {
		k := o.method + " " + o.path
		have[k] = o.op
		id, _ := o.op["operationId"].(string)
		if prev, dup := ids[id]; dup {
			t.Errorf("operationId %q used by both %s and %s", id, prev, k)
		}
		ids[id] = k
	}
	for k, op := range want {
		o, ok := have[k]
		if !ok {
			t.Errorf("route %s (%s) is missing from openapi.json", k, op)
			continue
		}
		if id := o["operationId"]; id != op {
			t.Errorf("%s: operationId = %v, want %q", k, id, op)
		}
		if s, _ := o["summary"].(string); s == "" {
			t.Errorf("%s: no summary", k)
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			t.Errorf("openapi.json has %s, which is not in Routes", k)
		}
	}
}

func TestOpenAPIRefs(t *testing.T) {
	doc := loadDoc(t)
	n := 0
	var walk func(v any, where string)
	walk = func(v any, where string) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"]; ok {
				n++
				s, _ := ref.(string)
				if !strings.HasPrefix(s, "#/components/") {
					t.Errorf("%s: $ref %v is not a local component", where, ref)
				} else if _, ok := resolve(doc, s); !ok {
					t.Errorf("%s: $ref %q does not resolve", where, s)
				}
			}
			for k, e := range v {
				walk(e, where+"/"+k)
			}
		case []any:
			for i, e := range v {
				walk(e, where+"/"+strconv.Itoa(i))
			}
		}
	}
	walk(doc, "#")
	if n == 0 {
		t.Errorf("no $ref found: the walk is broken")
	}
}

var templateParam = regexp.MustCompile(`\{([^}]+)\}`)

func TestOpenAPIPathParameters(t *testing.T) {
	doc := loadDoc(t)
	patterns := map[string]string{"id": `^sb-[0-9a-f]{16}$`, "pid": `^p[0-9]+$`}
	for _, o := range operations(t, doc) {
		k := o.method + " " + o.path
		declared := map[string]bool{}
		var params []any
		if ps, ok := o.item["parameters"].([]any); ok {
			params = append(params, ps...)
		}
		if ps, ok := o.op["parameters"].([]any); ok {
			params = append(params, ps...)
		}
		for _, p := range params {
			p := deref(t, doc, p)
			if p["in"] != "path" {
				continue
			}
			name, _ := p["name"].(string)
			declared[name] = true
			if p["required"] != true {
				t.Errorf("%s: path parameter %q is not required", k, name)
			}
			if want, ok := patterns[name]; ok {
				if got := obj(t, p["schema"], k+" "+name)["pattern"]; got != want {
					t.Errorf("%s: parameter %q pattern = %v, want %q", k, name, got, want)
				}
			}
		}
		inTemplate := map[string]bool{}
		for _, m := range templateParam.FindAllStringSubmatch(o.path, -1) {
			inTemplate[m[1]] = true
			if !declared[m[1]] {
				t.Errorf("%s: path parameter {%s} is not declared", k, m[1])
			}
		}
		for name := range declared {
			if !inTemplate[name] {
				t.Errorf("%s: declares path parameter %q, not in the path", k, name)
			}
		}
	}
}

func TestOpenAPIResponses(t *testing.T) {
	doc := loadDoc(t)
	comps := obj(t, doc["components"], "components")
	shared := obj(t, comps["responses"], "components.responses")
	byStatus := map[string]string{
		"400": "BadRequest", "401": "Unauthorized", "403": "Forbidden", "404": "NotFound",
		"409": "Conflict", "413": "TooLarge", "429": "TooManyRequests", "500": "Internal",
		"503": "Unavailable",
	}
	for status, name := range byStatus {
		r := obj(t, shared[name], "components.responses."+name)
		content := obj(t, r["content"], name+".content")
		schema := obj(t, obj(t, content["application/json"], name+" application/json")["schema"], name+" schema")
		if schema["$ref"] != "#/components/schemas/Error" {
			t.Errorf("components.responses.%s (%s) is not an Error", name, status)
		}
	}
	if _, ok := obj(t, obj(t, shared["TooManyRequests"], "429")["headers"], "429 headers")["Retry-After"]; !ok {
		t.Errorf("components.responses.TooManyRequests has no Retry-After header")
	}

	for _, o := range operations(t, doc) {
		k := o.method + " " + o.path
		rs := obj(t, o.op["responses"], k+" responses")
		success := 0
		for status, r := range rs {
			r := obj(t, r, k+" "+status)
			if strings.HasPrefix(status, "1") || strings.HasPrefix(status, "2") {
				success++
				continue
			}
			if name, ok := byStatus[status]; ok && !(o.path == "/readyz" && status == "503") {
				if r["$ref"] != "#/components/responses/"+name {
					t.Errorf("%s: response %s = %v, want the shared %s", k, status, r["$ref"], name)
				}
			}
		}
		if success == 0 {
			t.Errorf("%s: no success response", k)
		}
		_, hasSecurity := o.op["security"]
		if slices.Contains(unauthenticated, o.op["operationId"].(string)) {
			if !reflect.DeepEqual(o.op["security"], []any{}) {
				t.Errorf("%s: security = %v, want []", k, o.op["security"])
			}
		} else {
			if hasSecurity {
				t.Errorf("%s: overrides the top-level security", k)
			}
			if _, ok := rs["401"]; !ok {
				t.Errorf("%s: needs a key but documents no 401", k)
			}
		}
	}
}

// parsedTypes parses types.go: its exported struct types and its string
// constants.
func parsedTypes(t *testing.T) (structs []string, consts map[string]string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "types.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts = map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, s := range g.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if _, ok := s.Type.(*ast.StructType); ok && s.Name.IsExported() {
					structs = append(structs, s.Name.Name)
				}
			case *ast.ValueSpec:
				if g.Tok != token.CONST {
					continue
				}
				for i, n := range s.Names {
					if i < len(s.Values) {
						if lit, ok := s.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							v, _ := strconv.Unquote(lit.Value)
							consts[n.Name] = v
						}
					}
				}
			}
		}
	}
	return structs, consts
}

func TestOpenAPITypesListed(t *testing.T) {
	structs, _ := parsedTypes(t)
	var listed []string
	for _, v := range schemaTypes {
		listed = append(listed, reflect.TypeOf(v).Name())
	}
	for _, s := range structs {
		if !slices.Contains(listed, s) {
			t.Errorf("types.go declares %s, which schemaTypes (and so the OpenAPI check) leaves out", s)
		}
	}
}

func TestOpenAPIEnums(t *testing.T) {
	doc := loadDoc(t)
	_, consts := parsedTypes(t)
	schemas := obj(t, obj(t, doc["components"], "components")["schemas"], "schemas")
	enum := func(schema, prop string) []string {
		p := obj(t, obj(t, obj(t, schemas[schema], schema)["properties"], schema+".properties")[prop], schema+"."+prop)
		var out []string
		for _, v := range p["enum"].([]any) {
			out = append(out, v.(string))
		}
		sort.Strings(out)
		return out
	}
	want := func(prefix string) []string {
		var out []string
		for name, v := range consts {
			if strings.HasPrefix(name, prefix) {
				out = append(out, v)
			}
		}
		sort.Strings(out)
		return out
	}
	for _, c := range []struct{ schema, prop, prefix string }{
		{"ErrorBody", "code", "Code"},
		{"Sandbox", "state", "State"},
		{"Process", "state", "Process"},
		{"OutputEvent", "kind", "Event"},
		{"NetworkPolicy", "mode", "NetworkMode"},
	} {
		if got, w := enum(c.schema, c.prop), want(c.prefix); !slices.Equal(got, w) {
			t.Errorf("%s.%s enum = %v, want the %s* constants %v", c.schema, c.prop, got, c.prefix, w)
		}
	}
}

type jsonField struct {
	name     string
	required bool
	typ      reflect.Type
}

// jsonFields lists the JSON fields of a struct type as encoding/json sees
// them, embedded structs flattened.
func jsonFields(typ reflect.Type) []jsonField {
	var out []jsonField
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := slices.Contains(strings.Split(opts, ","), "omitempty")
		out = append(out, jsonField{name, !omit, f.Type})
	}
	return out
}

// schemaFields collects a schema's properties and required names, through
// $ref and allOf.
func schemaFields(t *testing.T, doc map[string]any, s map[string]any, props map[string]any, required map[string]bool) {
	t.Helper()
	s = deref(t, doc, s)
	for _, sub := range sliceOf(s["allOf"]) {
		schemaFields(t, doc, obj(t, sub, "allOf"), props, required)
	}
	if ps, ok := s["properties"].(map[string]any); ok {
		for k, v := range ps {
			props[k] = v
		}
	}
	for _, r := range sliceOf(s["required"]) {
		required[r.(string)] = true
	}
}

func sliceOf(v any) []any { s, _ := v.([]any); return s }

// refOf is the schema name a property refers to, directly or through a
// single-element allOf (used to give a $ref a description).
func refOf(p map[string]any) string {
	ref, _ := p["$ref"].(string)
	if all := sliceOf(p["allOf"]); ref == "" && len(all) == 1 {
		ref, _ = all[0].(map[string]any)["$ref"].(string)
	}
	return strings.TrimPrefix(ref, "#/components/schemas/")
}

var timeType = reflect.TypeFor[time.Time]()

// checkType reports a property whose schema does not match the Go type.
func checkType(t *testing.T, where string, typ reflect.Type, p map[string]any) {
	t.Helper()
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := func(typeName string) {
		if p["type"] != typeName {
			t.Errorf("%s: type = %v, want %s (Go %s)", where, p["type"], typeName, typ)
		}
	}
	switch {
	case typ == timeType:
		want("string")
		if p["format"] != "date-time" {
			t.Errorf("%s: format = %v, want date-time", where, p["format"])
		}
	case typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.Uint8:
		want("string")
		if p["format"] != "byte" {
			t.Errorf("%s: format = %v, want byte (base64)", where, p["format"])
		}
	case typ.Kind() == reflect.Slice:
		want("array")
		checkType(t, where+"[]", typ.Elem(), obj(t, p["items"], where+".items"))
	case typ.Kind() == reflect.Map:
		want("object")
		checkType(t, where+"{}", typ.Elem(), obj(t, p["additionalProperties"], where+".additionalProperties"))
	case typ.Kind() == reflect.Struct:
		if got := refOf(p); got != typ.Name() {
			t.Errorf("%s: refers to %q, want %s", where, got, typ.Name())
		}
	case typ.Kind() == reflect.String:
		want("string")
	case typ.Kind() == reflect.Bool:
		want("boolean")
	case typ.Kind() == reflect.Float32 || typ.Kind() == reflect.Float64:
		want("number")
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Uint64:
		want("integer")
		if typ.Kind() >= reflect.Uint && typ.Kind() <= reflect.Uint64 {
			if m, ok := p["minimum"].(float64); !ok || m < 0 {
				t.Errorf("%s: unsigned Go %s without minimum 0", where, typ)
			}
		}
	default:
		t.Errorf("%s: Go type %s not handled by the test", where, typ)
	}
}

func TestOpenAPISchemas(t *testing.T) {
	doc := loadDoc(t)
	schemas := obj(t, obj(t, doc["components"], "components")["schemas"], "schemas")
	for _, v := range schemaTypes {
		typ := reflect.TypeOf(v)
		name := typ.Name()
		s, ok := schemas[name].(map[string]any)
		if !ok {
			t.Errorf("components.schemas has no %s", name)
			continue
		}
		if d, _ := s["description"].(string); d == "" {
			t.Errorf("schema %s has no description", name)
		}
		props, required := map[string]any{}, map[string]bool{}
		schemaFields(t, doc, s, props, required)
		fields := map[string]bool{}
		for _, f := range jsonFields(typ) {
			fields[f.name] = true
			where := name + "." + f.name
			p, ok := props[f.name]
			if !ok {
				t.Errorf("schema %s lacks property %q (Go field of %s)", name, f.name, name)
				continue
			}
			if required[f.name] != f.required {
				t.Errorf("%s: required = %v, want %v (required exactly when not omitempty)", where, required[f.name], f.required)
			}
			checkType(t, where, f.typ, obj(t, p, where))
		}
		for p := range props {
			if !fields[p] {
				t.Errorf("schema %s has property %q, which %s lacks", name, p, name)
			}
		}
		for r := range required {
			if !fields[r] {
				t.Errorf("schema %s requires %q, which %s lacks", name, r, name)
			}
		}
	}
}
