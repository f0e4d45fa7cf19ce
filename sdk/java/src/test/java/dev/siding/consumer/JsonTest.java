package dev.siding.consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class JsonTest {
  @Test
  void readsEveryKindOfValue() {
    Object parsed =
        Json.parse(" {\"a\": [1, -2.5, 3e2, true, false, null], \"s\": \"q\\\"\\u00e9\\n\\ud83d\\ude00\", \"o\": {}} ");
    Map<String, Object> expected = new LinkedHashMap<>();
    expected.put("a", Arrays.asList(1L, -2.5, 300.0, true, false, null));
    expected.put("s", "q\"\u00e9\n\ud83d\ude00");
    expected.put("o", Map.of());
    assertEquals(expected, parsed);
  }

  @Test
  void refusesWhatIsNotJsonSayingWhere() {
    for (String bad : List.of("", "[1,]", "{\"a\" 1}", "01", "[1] x", "\"\\x\"", "tru", "[\"a\n\"]", "-")) {
      assertThrows(Json.ParseException.class, () -> Json.parse(bad), bad);
    }
    var error = assertThrows(Json.ParseException.class, () -> Json.parse("[1, 2, }"));
    assertTrue(error.getMessage().endsWith("at character 7"), error.getMessage());
    assertThrows(Json.ParseException.class, () -> Json.parse("[".repeat(100) + "]".repeat(100)));
  }

  @Test
  void writesWhatItReads() {
    Map<String, Object> value = new LinkedHashMap<>();
    value.put("id", "a\"b\\c\u0001");
    value.put("after", 2.5);
    value.put("whole", 30.0);
    value.put("list", List.of(1L, true));
    String text = Json.write(value);
    assertEquals("{\"id\":\"a\\\"b\\\\c\\u0001\",\"after\":2.5,\"whole\":30,\"list\":[1,true]}", text);
    assertEquals(Map.of("id", "a\"b\\c\u0001", "after", 2.5, "whole", 30L, "list", List.of(1L, true)), Json.parse(text));
  }
}
