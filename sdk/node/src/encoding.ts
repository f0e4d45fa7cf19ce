// Webhook bodies siding compressed (a route's compression = "gzip"): decoded before the
// signature is checked, since siding signs the body before it compresses it.

import type { IncomingHttpHeaders } from "node:http";
import { gunzipSync } from "node:zlib";

/** A body that cannot be decoded; `status` is the answer it deserves (415 an encoding this SDK
 * does not decode, 400 a broken gzip stream, 413 too large once decoded). */
export class BodyEncodingError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = "BodyEncodingError";
  }
}

/** The body as siding signed it: gunzipped when content-encoding is gzip (at most `maxBytes`
 * decoded), else `body` unchanged. Throws BodyEncodingError. */
export function decodeBody(headers: IncomingHttpHeaders, body: Buffer, maxBytes: number): Buffer {
  const encoding = (headers["content-encoding"] ?? "").trim().toLowerCase();
  if (encoding === "" || encoding === "identity") return body;
  if (encoding !== "gzip") throw new BodyEncodingError(415, `content-encoding "${encoding}" is not supported (gzip is)`);
  try {
    return gunzipSync(body, { maxOutputLength: maxBytes });
  } catch (error) {
    if (error instanceof RangeError) throw new BodyEncodingError(413, `the body is larger than ${maxBytes} bytes decoded`);
    throw new BodyEncodingError(400, `the gzip body does not decode: ${(error as Error).message}`);
  }
}

/** rawHeaders without content-encoding: the body they go with is decoded. */
export function withoutEncoding(rawHeaders: readonly string[]): string[] {
  const kept: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if ((rawHeaders[i] as string).toLowerCase() === "content-encoding") continue;
    kept.push(rawHeaders[i] as string, rawHeaders[i + 1] as string);
  }
  return kept;
}
