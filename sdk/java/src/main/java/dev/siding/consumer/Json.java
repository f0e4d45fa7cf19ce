package dev.siding.consumer;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The little JSON the batch envelope needs (RFC 8259), so the SDK depends on nothing but gRPC:
 * objects are LinkedHashMaps, arrays Lists, integers Longs, other numbers Doubles.
 */
final class Json {
  private static final int MAX_DEPTH = 64;

  private final String text;
  private int at;

  private Json(String text) {
    this.text = text;
  }

  /** Thrown for text that is not JSON; the message says where. */
  static final class ParseException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    ParseException(String message) {
      super(message);
    }
  }

  static Object parse(String text) {
    Json json = new Json(text);
    json.blank();
    Object value = json.value(0);
    json.blank();
    if (json.at != text.length()) {
      throw json.error("unexpected text after the value");
    }
    return value;
  }

  private ParseException error(String what) {
    return new ParseException(what + " at character " + at);
  }

  private void blank() {
    while (at < text.length()) {
      char c = text.charAt(at);
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
        return;
      }
      at++;
    }
  }

  private Object value(int depth) {
    if (depth > MAX_DEPTH) {
      throw error("nested too deep");
    }
    if (at >= text.length()) {
      throw error("unexpected end");
    }
    char c = text.charAt(at);
    switch (c) {
      case '{':
        return object(depth);
      case '[':
        return array(depth);
      case '"':
        return string();
      case 't':
        return literal("true", Boolean.TRUE);
      case 'f':
        return literal("false", Boolean.FALSE);
      case 'n':
        return literal("null", null);
      default:
        if (c == '-' || (c >= '0' && c <= '9')) {
          return number();
        }
        throw error("unexpected character '" + c + "'");
    }
  }

  private Object literal(String word, Object value) {
    if (!text.startsWith(word, at)) {
      throw error("unexpected text");
    }
    at += word.length();
    return value;
  }

  private Map<String, Object> object(int depth) {
    Map<String, Object> map = new LinkedHashMap<>();
    at++;
    blank();
    if (peek('}')) {
      at++;
      return map;
    }
    while (true) {
      blank();
      if (!peek('"')) {
        throw error("expected a string key");
      }
      String key = string();
      blank();
      expect(':');
      blank();
      map.put(key, value(depth + 1));
      blank();
      if (peek(',')) {
        at++;
      } else {
        expect('}');
        return map;
      }
    }
  }

  private List<Object> array(int depth) {
    List<Object> list = new ArrayList<>();
    at++;
    blank();
    if (peek(']')) {
      at++;
      return list;
    }
    while (true) {
      blank();
      list.add(value(depth + 1));
      blank();
      if (peek(',')) {
        at++;
      } else {
        expect(']');
        return list;
      }
    }
  }

  private boolean peek(char c) {
    return at < text.length() && text.charAt(at) == c;
  }

  private void expect(char c) {
    if (!peek(c)) {
      throw error("expected '" + c + "'");
    }
    at++;
  }

  private String string() {
    StringBuilder out = new StringBuilder();
    at++;
    while (true) {
      if (at >= text.length()) {
        throw error("unterminated string");
      }
      char c = text.charAt(at++);
      if (c == '"') {
        return out.toString();
      }
      if (c < 0x20) {
        throw error("control character in a string");
      }
      if (c != '\\') {
        out.append(c);
        continue;
      }
      if (at >= text.length()) {
        throw error("unterminated string");
      }
      char e = text.charAt(at++);
      switch (e) {
        case '"', '\\', '/' -> out.append(e);
        case 'b' -> out.append('\b');
        case 'f' -> out.append('\f');
        case 'n' -> out.append('\n');
        case 'r' -> out.append('\r');
        case 't' -> out.append('\t');
        case 'u' -> {
          if (at + 4 > text.length()) {
            throw error("short \\u escape");
          }
          try {
            out.append((char) Integer.parseInt(text.substring(at, at + 4), 16));
          } catch (NumberFormatException ex) {
            throw error("bad \\u escape");
          }
          at += 4;
        }
        default -> throw error("bad escape '\\" + e + "'");
      }
    }
  }

  private Object number() {
    int start = at;
    if (peek('-')) {
      at++;
    }
    if (peek('0')) {
      at++;
    } else if (!digits()) {
      throw error("bad number");
    }
    boolean whole = true;
    if (peek('.')) {
      at++;
      whole = false;
      if (!digits()) {
        throw error("bad number");
      }
    }
    if (peek('e') || peek('E')) {
      at++;
      whole = false;
      if (peek('+') || peek('-')) {
        at++;
      }
      if (!digits()) {
        throw error("bad number");
      }
    }
    String literal = text.substring(start, at);
    if (whole) {
      try {
        return Long.parseLong(literal);
      } catch (NumberFormatException tooBig) {
        return Double.parseDouble(literal);
      }
    }
    return Double.parseDouble(literal);
  }

  private boolean digits() {
    int start = at;
    while (at < text.length() && text.charAt(at) >= '0' && text.charAt(at) <= '9') {
      at++;
    }
    return at > start;
  }

  /** Maps, lists, strings, numbers, booleans and nulls as JSON text. */
  static String write(Object value) {
    StringBuilder out = new StringBuilder();
    write(value, out);
    return out.toString();
  }

  private static void write(Object value, StringBuilder out) {
    if (value == null) {
      out.append("null");
    } else if (value instanceof String s) {
      quote(s, out);
    } else if (value instanceof Double d) {
      if (d.isNaN() || d.isInfinite()) {
        throw new IllegalArgumentException("JSON has no " + d);
      }
      out.append(d == Math.rint(d) && Math.abs(d) < 1e15 ? Long.toString(d.longValue()) : d.toString());
    } else if (value instanceof Number || value instanceof Boolean) {
      out.append(value);
    } else if (value instanceof Map<?, ?> map) {
      out.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> entry : map.entrySet()) {
        if (!first) {
          out.append(',');
        }
        first = false;
        quote(String.valueOf(entry.getKey()), out);
        out.append(':');
        write(entry.getValue(), out);
      }
      out.append('}');
    } else if (value instanceof List<?> list) {
      out.append('[');
      for (int i = 0; i < list.size(); i++) {
        if (i > 0) {
          out.append(',');
        }
        write(list.get(i), out);
      }
      out.append(']');
    } else {
      throw new IllegalArgumentException("cannot write " + value.getClass().getSimpleName() + " as JSON");
    }
  }

  private static void quote(String s, StringBuilder out) {
    out.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        case '\n' -> out.append("\\n");
        case '\r' -> out.append("\\r");
        case '\t' -> out.append("\\t");
        default -> {
          if (c < 0x20) {
            out.append(String.format("\\u%04x", (int) c));
          } else {
            out.append(c);
          }
        }
      }
    }
    out.append('"');
  }
}
