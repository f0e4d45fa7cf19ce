package dev.siding.consumer;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.util.Locale;
import java.util.zip.GZIPInputStream;
import java.util.zip.ZipException;

/**
 * Webhook bodies siding compressed (a route's {@code compression = "gzip"}): decoded before the
 * signature is checked, since siding signs the body before it compresses it.
 */
public final class BodyEncoding {
  private BodyEncoding() {}

  /**
   * A body that cannot be decoded; {@link #status()} is the answer it deserves (415 an encoding
   * this SDK does not decode, 400 a broken gzip stream, 413 too large once decoded).
   */
  public static final class BodyEncodingException extends Exception {
    private final int status;

    BodyEncodingException(int status, String message) {
      super(message);
      this.status = status;
    }

    public int status() {
      return status;
    }
  }

  /**
   * The body as siding signed it: gunzipped when {@code contentEncoding} is gzip (at most {@code
   * maxBytes} decoded), else {@code body} unchanged.
   */
  public static byte[] decode(String contentEncoding, byte[] body, long maxBytes) throws BodyEncodingException {
    String encoding = contentEncoding == null ? "" : contentEncoding.strip().toLowerCase(Locale.ROOT);
    if (encoding.isEmpty() || encoding.equals("identity")) {
      return body;
    }
    if (!encoding.equals("gzip")) {
      throw new BodyEncodingException(415, "content-encoding \"" + encoding + "\" is not supported (gzip is)");
    }
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try (GZIPInputStream in = new GZIPInputStream(new ByteArrayInputStream(body))) {
      byte[] chunk = new byte[64 * 1024];
      long size = 0;
      for (int n; (n = in.read(chunk)) > 0; ) {
        size += n;
        if (size > maxBytes) {
          throw new BodyEncodingException(413, "the body is larger than " + maxBytes + " bytes decoded");
        }
        out.write(chunk, 0, n);
      }
    } catch (EOFException e) {
      throw new BodyEncodingException(400, "the gzip body is cut short");
    } catch (ZipException e) {
      throw new BodyEncodingException(400, "the gzip body does not decode: " + e.getMessage());
    } catch (IOException e) {
      throw new BodyEncodingException(400, "the gzip body does not decode: " + e);
    }
    return out.toByteArray();
  }
}
