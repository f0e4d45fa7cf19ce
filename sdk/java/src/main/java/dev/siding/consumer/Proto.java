package dev.siding.consumer;

import com.google.protobuf.ByteString;
import java.util.ArrayList;
import java.util.List;
import siding.v1.ConsumerOuterClass;

/** Between the contract's messages and this SDK's types. */
final class Proto {
  private Proto() {}

  static Delivery delivery(ConsumerOuterClass.Delivery message) {
    List<Header> headers = new ArrayList<>(message.getHeadersCount());
    for (ConsumerOuterClass.Header h : message.getHeadersList()) {
      headers.add(new Header(h.getKey(), h.getValue().toByteArray()));
    }
    return new Delivery(
        message.getId(),
        message.getTopic(),
        message.getPartition(),
        message.getOffset(),
        message.hasKey() ? message.getKey().toByteArray() : null,
        message.hasValue() ? message.getValue().toByteArray() : null,
        headers,
        message.getTimestampMs(),
        message.getAttempt(),
        message.getLane());
  }

  /** A Reply as a Result. A back-off becomes a RETRY with its delay: a Result cannot say it. */
  static ConsumerOuterClass.Result result(String deliveryId, Reply reply) {
    ConsumerOuterClass.Result.Builder result =
        ConsumerOuterClass.Result.newBuilder()
            .setDeliveryId(deliveryId)
            .setVerdict(verdict(reply.verdict()))
            .setReason(reply.reason());
    reply.after().ifPresent(after -> result.setRetryAfterSeconds(Reply.seconds(after)));
    for (Output output : reply.outputs()) {
      result.addOutputs(output(output));
    }
    return result.build();
  }

  private static ConsumerOuterClass.Verdict verdict(Verdict verdict) {
    return switch (verdict) {
      case ACK -> ConsumerOuterClass.Verdict.VERDICT_ACK;
      case DEAD -> ConsumerOuterClass.Verdict.VERDICT_DEAD;
      case RETRY, BACKOFF -> ConsumerOuterClass.Verdict.VERDICT_RETRY;
    };
  }

  private static ConsumerOuterClass.Output output(Output output) {
    ConsumerOuterClass.Output.Builder message =
        ConsumerOuterClass.Output.newBuilder().setTopic(output.topic());
    if (output.key() != null) {
      message.setKey(ByteString.copyFrom(output.key()));
    }
    if (output.value() != null) {
      message.setValue(ByteString.copyFrom(output.value()));
    }
    for (Header h : output.headers()) {
      message.addHeaders(
          ConsumerOuterClass.Header.newBuilder()
              .setKey(h.key())
              .setValue(ByteString.copyFrom(h.value())));
    }
    return message.build();
  }
}
