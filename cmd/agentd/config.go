package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"github.com/agentd/agentd/internal/backend"
	"github.com/agentd/agentd/internal/datadir"
)

// The settings file of `agentd run`: a JSON object whose keys are the flags' names in
// snake_case ({"backend": "https://…", "cleanup_wait": "3h"}). It is read through kong's
// configuration loader, with agentd's precedence: a flag beats its AGENTD_* variable, which
// beats the file, which beats the default. Kong's own JSON resolver would let the file beat
// the environment, and would ignore keys it does not know; this one refuses them, and names
// the file, the key and the reason for every value it cannot take.

// defaultConfigFile is read when it exists and no --config is given.
const defaultConfigFile = "/etc/agentd/agentd.json"

// configDefaultPath is defaultConfigFile, replaced by tests.
var configDefaultPath = defaultConfigFile

// configNotSettings are flags of `run` that the file cannot set.
var configNotSettings = map[string]bool{"config": true, "print_config": true, "help": true}

// configKey is a flag's key in the file.
func configKey(flag string) string { return strings.ReplaceAll(flag, "-", "_") }

// configFileLimit bounds the settings file: a few dozen settings fit in a few kilobytes.
const configFileLimit = 1 << 20

// loadConfigFile is kong's ConfigurationLoader for the settings file.
func loadConfigFile(r io.Reader) (kong.Resolver, error) {
	b, err := io.ReadAll(io.LimitReader(r, configFileLimit+1))
	if err != nil {
		return nil, err
	}
	if len(b) > configFileLimit {
		return nil, fmt.Errorf("more than %d bytes: not a settings file", configFileLimit)
	}
	if err := checkDuplicateKeys(b); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var values map[string]any
	if err := dec.Decode(&values); err != nil {
		return nil, fmt.Errorf("not a JSON object of settings: %w", err)
	}
	if values == nil {
		return nil, errors.New("not a JSON object of settings: null")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more after the JSON object: one object of settings per file")
	}
	return &configFile{values: values}, nil
}

// loadSettingsFile reads the settings file through loadConfigFile: the settings decide the
// backend, the bind roots and the engine, so whoever can write the file runs the agent. It is
// read as a file the agent trusts (datadir.ReadTrusted): a regular file (a FIFO is refused, not
// waited on), owned by root or the agent's user, writable by no group or other user, on a path
// no one else could redirect, at most 1 MiB. A link is followed (config management links files
// into /etc): what it reaches is what is checked and read.
func loadSettingsFile(path string) (kong.Resolver, error) {
	b, err := datadir.ReadTrusted(kong.ExpandPath(path), 1<<20)
	if err != nil {
		return nil, err
	}
	return loadConfigFile(bytes.NewReader(b))
}

// checkDuplicateKeys refuses an object, at any depth, that names a key twice: encoding/json
// keeps the last value silently, so an operator who adds a setting that is already further up
// would see the other one win without a word. It reads tokens only; a syntax error is left
// for the decoder to report.
func checkDuplicateKeys(b []byte) error {
	type frame struct {
		name  string          // where it is: "" at the top, "a.b", "a[]"
		keys  map[string]bool // nil: an array
		atKey bool            // the next string token is a key
		last  string          // the key whose value is being read
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // io.EOF, or a syntax error the decoder names
		}
		var top *frame
		if n := len(stack); n > 0 {
			top = stack[n-1]
		}
		if k, ok := tok.(string); ok && top != nil && top.atKey {
			if top.keys[k] {
				where := ""
				if top.name != "" {
					where = fmt.Sprintf(" in %q", top.name)
				}
				return fmt.Errorf("key %q appears twice%s: JSON would keep the last one silently; keep one", k, where)
			}
			top.keys[k], top.atKey, top.last = true, false, k
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			name := ""
			switch {
			case top != nil && top.keys == nil:
				name = top.name + "[]"
			case top != nil && top.name != "":
				name = top.name + "." + top.last
			case top != nil:
				name = top.last
			}
			f := &frame{name: name}
			if tok == json.Delim('{') {
				f.keys, f.atKey = map[string]bool{}, true
			}
			stack = append(stack, f)
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if n := len(stack); n > 0 && stack[n-1].keys != nil {
			stack[n-1].atKey = true // a value of the object ended: a key comes next
		}
	}
}

// configFile resolves flags from one settings file.
type configFile struct {
	path   string
	values map[string]any
}

func (f *configFile) Validate(*kong.Application) error { return nil } // checkKeys does it, with the file's name

// checkKeys refuses keys that name no setting of the command.
func (f *configFile) checkKeys(node *kong.Node) error {
	known := map[string]bool{}
	var names []string
	for _, fl := range node.Flags {
		if k := configKey(fl.Name); !configNotSettings[k] {
			known[k] = true
			names = append(names, k)
		}
	}
	slices.Sort(names)
	keys := make([]string, 0, len(f.values))
	for k := range f.values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		switch {
		case known[k]: // a setting by that name exists: its value is a path or a switch, not a secret
		case isSecretName(k):
			return fmt.Errorf("%s: key %q: secrets are never read from the settings file; put it in a file of its own (mode 0600) and name that file (token_file)", f.path, k)
		default:
			return fmt.Errorf("%s: key %q: no such setting of agentd run (settings: %s)", f.path, k, strings.Join(names, ", "))
		}
	}
	return nil
}

// Resolve gives a flag its value from the file, unless its environment variable is set (the
// environment beats the file; kong has already applied it). The value is checked here, so a
// bad one is reported with the file and the key rather than as a bad flag.
func (f *configFile) Resolve(_ *kong.Context, _ *kong.Path, flag *kong.Flag) (any, error) {
	key := configKey(flag.Name)
	raw, ok := f.values[key]
	if !ok || configNotSettings[key] {
		return nil, nil
	}
	for _, env := range flag.Tag.Envs {
		if _, set := os.LookupEnv(env); set {
			return nil, nil
		}
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%s: key %q: %s", f.path, key, fmt.Sprintf(format, a...))
	}
	target := flag.Target.Type()
	if target.Kind() == reflect.Slice { // a repeatable flag: a list of strings, or one string
		list, ok := raw.([]any)
		if s, one := raw.(string); one {
			list, ok = []any{s}, true
		}
		if !ok {
			return nil, bad("want a %s, not a JSON %s", jsonKind(target), jsonTypeName(raw))
		}
		for i, el := range list {
			if _, ok := el.(string); !ok {
				return nil, bad("item %d: want a string, not a JSON %s", i, jsonTypeName(el))
			}
		}
		probe := reflect.New(target).Elem()
		if err := flag.Parse(kong.ScanFromTokens(kong.Token{Type: kong.FlagValueToken, Value: list}), probe); err != nil {
			return nil, bad("%s", strings.TrimPrefix(err.Error(), "--"+flag.Name+": "))
		}
		return list, nil
	}
	var text string
	switch v := raw.(type) {
	case string:
		if target.Kind() != reflect.String && target != reflect.TypeFor[time.Duration]() {
			return nil, bad("want a %s, not the string %q", jsonKind(target), v)
		}
		text = v
	case json.Number:
		if !isNumber(target) || target == reflect.TypeFor[time.Duration]() {
			return nil, bad("want a %s, not the number %s", jsonKind(target), v)
		}
		text = v.String()
	case bool:
		if target.Kind() != reflect.Bool {
			return nil, bad("want a %s, not %t", jsonKind(target), v)
		}
		text = fmt.Sprint(v)
	case nil:
		return nil, bad("null: leave the key out to keep the default")
	default:
		return nil, bad("want a %s, not a JSON %s", jsonKind(target), jsonTypeName(raw))
	}
	probe := reflect.New(target).Elem()
	if err := flag.Parse(kong.ScanFromTokens(kong.Token{Type: kong.FlagValueToken, Value: text}), probe); err != nil {
		return nil, bad("%s", strings.TrimPrefix(err.Error(), "--"+flag.Name+": "))
	}
	if flag.Enum != "" && !flag.EnumMap()[text] {
		return nil, bad("%q is not one of %s", text, strings.Join(flag.EnumSlice(), ", "))
	}
	return text, nil
}

func isNumber(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// jsonKind is how a flag's value is written in the file.
func jsonKind(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return `duration string such as "90s" or "3h"`
	case t.Kind() == reflect.Bool:
		return "boolean (true or false)"
	case isNumber(t):
		return "number"
	case t.Kind() == reflect.Slice:
		return `list of strings such as ["/srv/a", "/srv/b"]`
	default:
		return "string"
	}
}

func jsonTypeName(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}

// isSecretName reports whether a key looks like it would carry a secret itself rather than the
// path of a file holding it (token, password, …; not token_file, not allow_plain_token).
func isSecretName(key string) bool {
	if strings.HasSuffix(key, "_file") || strings.HasPrefix(key, "allow_") {
		return false
	}
	for _, s := range []string{"token", "secret", "password", "credential", "private_key"} {
		if strings.Contains(key, s) {
			return true
		}
	}
	return false
}

// BeforeResolve loads the settings file (--config, else the default file when it exists) as
// a resolver of this parse, before kong resolves the flags the command line left unset.
func (r *runCmd) BeforeResolve(k *kong.Kong, kctx *kong.Context, trace *kong.Path) error {
	node := trace.Node()
	path, explicit := "", false
	for _, fl := range node.Flags {
		if fl.Name == "config" {
			path, _ = kctx.FlagValue(fl).(string)
		}
	}
	if path != "" {
		explicit = true
	} else if _, err := os.Stat(configDefaultPath); err == nil {
		path = configDefaultPath
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", configDefaultPath, err)
	}
	if path == "" {
		return nil
	}
	res, err := loadSettingsFile(path)
	if err != nil {
		if explicit && errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("--config %s: no such file", path)
		}
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || strings.HasPrefix(err.Error(), "open ") {
			return fmt.Errorf("--config %s: %w", path, err)
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	f := res.(*configFile)
	f.path = path
	if err := f.checkKeys(node); err != nil {
		return err
	}
	r.configLoaded = path
	kctx.AddResolver(f)
	return nil
}

// configSetting is one line of --print-config.
type configSetting struct {
	Value  any    `json:"value"`
	Source string `json:"source"` // flag, env AGENTD_X, file PATH, default, unset
}

// printConfig writes the effective settings of `agentd run`, each with where its value came
// from. A secret is never printed: only the path of the file holding it is a setting.
func (r *runCmd) printConfig(w io.Writer, kctx *kong.Context) error {
	node := kctx.Selected()
	fromCmdLine, fromFile := map[*kong.Flag]bool{}, map[*kong.Flag]bool{}
	for _, p := range kctx.Path {
		if p.Flag != nil {
			if p.Resolved {
				fromFile[p.Flag] = true
			} else {
				fromCmdLine[p.Flag] = true
			}
		}
	}
	settings := map[string]configSetting{}
	for _, fl := range node.Flags {
		key := configKey(fl.Name)
		if configNotSettings[key] {
			continue
		}
		s := configSetting{Value: fl.Target.Interface(), Source: "default"}
		if d, ok := s.Value.(time.Duration); ok {
			s.Value = d.String()
		}
		switch {
		case fromCmdLine[fl]:
			s.Source = "flag"
		case fromFile[fl]:
			s.Source = "file " + r.configLoaded
		case envSet(fl.Tag.Envs) != "":
			s.Source = "env " + envSet(fl.Tag.Envs)
		case !fl.HasDefault:
			s.Source = "unset"
		}
		if isSecretName(key) && fl.Target.Kind() == reflect.String {
			s.Value = "(not shown)" // no such setting today; one added by mistake stays unprinted
		} else if v, ok := s.Value.(string); ok {
			// A password in a URL (--backend http://user:pass@host, which run refuses) is
			// never printed: the operator sees REDACTED where it was.
			s.Value = backend.RedactURL(v)
		}
		settings[key] = s
	}
	out := map[string]any{"precedence": "flag > env AGENTD_* > file > default", "config_file": r.configLoaded, "settings": settings}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}

func envSet(envs []string) string {
	for _, e := range envs {
		if _, ok := os.LookupEnv(e); ok {
			return e
		}
	}
	return ""
}
