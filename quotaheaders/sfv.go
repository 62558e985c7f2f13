package quotaheaders

// A parser for RFC 8941 structured field values, limited to what the
// RateLimit fields use: Lists and Dictionaries of Items and Inner Lists, with
// Parameters. Every bare item type of RFC 8941 is recognised, so a field that
// carries, say, a Byte Sequence parameter parses; any syntax error fails the
// whole field, as §4.2 requires.

import "strings"

type sfKind uint8

const (
	sfInteger sfKind = iota + 1
	sfDecimal
	sfString
	sfToken
	sfBytes
	sfBoolean
)

// sfBare is one bare item. Integers live in num; Decimals live in num as
// thousandths, which is exact because RFC 8941 allows at most three
// fractional digits. Strings, Tokens and Byte Sequences (still encoded) live
// in str.
type sfBare struct {
	kind sfKind
	num  int64
	str  string
	flag bool
}

type sfParam struct {
	key   string
	value sfBare
}

// sfItem is an Item, or an Inner List when inner is true.
type sfItem struct {
	bare   sfBare
	inner  bool
	items  []sfItem
	params []sfParam
}

// param returns the value of the parameter key; a repeated key takes the
// last value (§4.2.3.2).
func (it sfItem) param(key string) (sfBare, bool) {
	for i := len(it.params) - 1; i >= 0; i-- {
		if it.params[i].key == key {
			return it.params[i].value, true
		}
	}
	return sfBare{}, false
}

// name is the identifier a String or Token item carries.
func (it sfItem) name() (string, bool) {
	if it.inner || (it.bare.kind != sfString && it.bare.kind != sfToken) {
		return "", false
	}
	return it.bare.str, true
}

// nonNegativeInt returns b when it is an Integer of at least zero.
func (b sfBare) nonNegativeInt() (int64, bool) {
	if b.kind != sfInteger || b.num < 0 {
		return 0, false
	}
	return b.num, true
}

type sfMember struct {
	key  string
	item sfItem
}

type sfParser struct {
	s   string
	err bool
}

// parseSFList parses s as an RFC 8941 List.
func parseSFList(s string) ([]sfItem, bool) {
	p := sfParser{s: strings.TrimLeft(s, " ")}
	var list []sfItem
	for p.s != "" {
		list = append(list, p.itemOrInnerList())
		if p.err || !p.nextMember() {
			break
		}
	}
	if p.err || strings.TrimLeft(p.s, " ") != "" {
		return nil, false
	}
	return list, true
}

// parseSFDictionary parses s as an RFC 8941 Dictionary. A repeated key keeps
// its first position and takes its last value (§4.2.2).
func parseSFDictionary(s string) ([]sfMember, bool) {
	p := sfParser{s: strings.TrimLeft(s, " ")}
	var dict []sfMember
	for p.s != "" {
		key := p.key()
		if p.err {
			return nil, false
		}
		var it sfItem
		if p.peek('=') {
			p.s = p.s[1:]
			it = p.itemOrInnerList()
		} else {
			it = sfItem{bare: sfBare{kind: sfBoolean, flag: true}, params: p.params()}
		}
		if p.err {
			return nil, false
		}
		replaced := false
		for i := range dict {
			if dict[i].key == key {
				dict[i].item = it
				replaced = true
			}
		}
		if !replaced {
			dict = append(dict, sfMember{key: key, item: it})
		}
		if !p.nextMember() {
			break
		}
	}
	if p.err || strings.TrimLeft(p.s, " ") != "" {
		return nil, false
	}
	return dict, true
}

// nextMember consumes the separator between two members. It reports false at
// the end of input; a missing or trailing comma is an error.
func (p *sfParser) nextMember() bool {
	p.s = trimOWS(p.s)
	if p.s == "" {
		return false
	}
	if !p.peek(',') {
		p.err = true
		return false
	}
	p.s = trimOWS(p.s[1:])
	if p.s == "" {
		p.err = true
		return false
	}
	return true
}

func (p *sfParser) peek(c byte) bool { return p.s != "" && p.s[0] == c }

func (p *sfParser) itemOrInnerList() sfItem {
	if p.peek('(') {
		return p.innerList()
	}
	return p.item()
}

func (p *sfParser) item() sfItem {
	b := p.bareItem()
	if p.err {
		return sfItem{}
	}
	return sfItem{bare: b, params: p.params()}
}

func (p *sfParser) innerList() sfItem {
	p.s = p.s[1:] // "("
	var items []sfItem
	for !p.err {
		p.s = strings.TrimLeft(p.s, " ")
		if p.peek(')') {
			p.s = p.s[1:]
			return sfItem{inner: true, items: items, params: p.params()}
		}
		items = append(items, p.item())
		if p.err {
			break
		}
		if !p.peek(' ') && !p.peek(')') {
			p.err = true
		}
	}
	p.err = true
	return sfItem{}
}

func (p *sfParser) params() []sfParam {
	var params []sfParam
	for !p.err && p.peek(';') {
		p.s = strings.TrimLeft(p.s[1:], " ")
		key := p.key()
		if p.err {
			return nil
		}
		value := sfBare{kind: sfBoolean, flag: true}
		if p.peek('=') {
			p.s = p.s[1:]
			value = p.bareItem()
		}
		params = append(params, sfParam{key: key, value: value})
	}
	return params
}

func (p *sfParser) key() string {
	if p.s == "" || !(isLCAlpha(p.s[0]) || p.s[0] == '*') {
		p.err = true
		return ""
	}
	i := 1
	for i < len(p.s) && isKeyChar(p.s[i]) {
		i++
	}
	k := p.s[:i]
	p.s = p.s[i:]
	return k
}

func (p *sfParser) bareItem() sfBare {
	if p.s == "" {
		p.err = true
		return sfBare{}
	}
	switch c := p.s[0]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || isAlpha(c):
		return p.token()
	case c == ':':
		return p.bytes()
	case c == '?':
		return p.boolean()
	}
	p.err = true
	return sfBare{}
}

// number follows §4.2.4: at most 15 integer digits, or at most 12 integer and
// 3 fractional digits for a Decimal.
func (p *sfParser) number() sfBare {
	neg := p.peek('-')
	if neg {
		p.s = p.s[1:]
	}
	i := 0
	for i < len(p.s) && isDigit(p.s[i]) {
		i++
	}
	intDigits := p.s[:i]
	if intDigits == "" || len(intDigits) > 15 {
		p.err = true
		return sfBare{}
	}
	b := sfBare{kind: sfInteger, num: digitsValue(intDigits)}
	p.s = p.s[i:]
	if p.peek('.') {
		if len(intDigits) > 12 {
			p.err = true
			return sfBare{}
		}
		j := 1
		for j < len(p.s) && isDigit(p.s[j]) {
			j++
		}
		frac := p.s[1:j]
		if frac == "" || len(frac) > 3 {
			p.err = true
			return sfBare{}
		}
		p.s = p.s[j:]
		b.kind = sfDecimal
		b.num = b.num*1000 + digitsValue(frac+"000"[len(frac):])
	}
	if neg {
		b.num = -b.num
	}
	return b
}

// digitsValue is the value of at most 15 decimal digits.
func digitsValue(digits string) int64 {
	var n int64
	for i := 0; i < len(digits); i++ {
		n = n*10 + int64(digits[i]-'0')
	}
	return n
}

func (p *sfParser) str() sfBare {
	var b strings.Builder
	escaped := false
	for i := 1; i < len(p.s); i++ {
		c := p.s[i]
		switch {
		case c == '\\':
			i++
			if i == len(p.s) || (p.s[i] != '"' && p.s[i] != '\\') {
				p.err = true
				return sfBare{}
			}
			if !escaped {
				b.WriteString(p.s[1 : i-1])
				escaped = true
			}
			b.WriteByte(p.s[i])
		case c == '"':
			v := p.s[1:i]
			if escaped {
				v = b.String()
			}
			p.s = p.s[i+1:]
			return sfBare{kind: sfString, str: v}
		case c < 0x20 || c > 0x7e:
			p.err = true
			return sfBare{}
		default:
			if escaped {
				b.WriteByte(c)
			}
		}
	}
	p.err = true // no closing quote
	return sfBare{}
}

func (p *sfParser) token() sfBare {
	i := 1
	for i < len(p.s) && (isTChar(p.s[i]) || p.s[i] == ':' || p.s[i] == '/') {
		i++
	}
	b := sfBare{kind: sfToken, str: p.s[:i]}
	p.s = p.s[i:]
	return b
}

// bytes checks the base64 alphabet but does not decode: nothing here needs
// the bytes, and §4.2.7 asks parsers to be lenient about padding anyway.
func (p *sfParser) bytes() sfBare {
	end := strings.IndexByte(p.s[1:], ':')
	if end < 0 {
		p.err = true
		return sfBare{}
	}
	content := p.s[1 : 1+end]
	for i := 0; i < len(content); i++ {
		c := content[i]
		if !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
			p.err = true
			return sfBare{}
		}
	}
	p.s = p.s[2+end:]
	return sfBare{kind: sfBytes, str: content}
}

func (p *sfParser) boolean() sfBare {
	if len(p.s) < 2 || (p.s[1] != '0' && p.s[1] != '1') {
		p.err = true
		return sfBare{}
	}
	b := sfBare{kind: sfBoolean, flag: p.s[1] == '1'}
	p.s = p.s[2:]
	return b
}

func isDigit(c byte) bool   { return '0' <= c && c <= '9' }
func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || ('A' <= c && c <= 'Z') }

func isKeyChar(c byte) bool {
	return isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*'
}

// isTChar reports whether c is an RFC 9110 tchar.
func isTChar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// trimOWS drops leading optional whitespace (SP and HTAB).
func trimOWS(s string) string { return strings.TrimLeft(s, " \t") }
