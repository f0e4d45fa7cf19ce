package dev.siding.consumer;

import io.grpc.stub.ServerCallStreamObserver;
import io.grpc.stub.StreamObserver;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Executor;
import java.util.function.Consumer;
import java.util.function.Function;
import siding.v1.ConsumerOuterClass.Delivery;
import siding.v1.ConsumerOuterClass.Result;

/**
 * One DeliverStream or DeliverBatches call: each delivery read is handled on the executor at once;
 * results go back as they finish (on DeliverBatches, results finished while a frame was being
 * written share the next frame). Reads one message at a time (manual flow control), so drain()
 * stops reading at once. Ends when the client stops sending (or drain() is called) and every
 * delivery read so far has been answered.
 *
 * @param <I> what the client sends: a Delivery or a DeliveryBatch
 * @param <O> what goes back: a Result or a ResultBatch
 */
final class CallSession<I, O> implements StreamObserver<I> {
  private final ServerCallStreamObserver<O> out;
  private final Function<I, List<Delivery>> split;
  private final Function<List<Result>, List<O>> frames;
  private final Function<Delivery, Result> answer;
  private final Executor executor;
  private final Consumer<CallSession<?, ?>> onClose;
  private final Object lock = new Object();
  private List<Result> pending = new ArrayList<>();
  private boolean flushing;
  private int inFlight;
  private boolean reading = true;
  private boolean closed;

  CallSession(
      StreamObserver<O> out,
      Function<I, List<Delivery>> split,
      Function<List<Result>, List<O>> frames,
      Function<Delivery, Result> answer,
      Executor executor,
      Consumer<CallSession<?, ?>> onClose) {
    this.out = (ServerCallStreamObserver<O>) out;
    this.split = split;
    this.frames = frames;
    this.answer = answer;
    this.executor = executor;
    this.onClose = onClose;
    this.out.disableAutoRequest();
    this.out.setOnCancelHandler(this::cancelled);
    this.out.request(1);
  }

  @Override
  public void onNext(I message) {
    List<Delivery> deliveries = split.apply(message);
    synchronized (lock) {
      if (!reading) {
        return; // read as drain() began: never answered, siding sends it again
      }
      inFlight += deliveries.size();
      out.request(1);
    }
    for (Delivery delivery : deliveries) {
      executor.execute(() -> done(answer.apply(delivery)));
    }
  }

  @Override
  public void onError(Throwable error) {
    cancelled();
  }

  @Override
  public void onCompleted() {
    synchronized (lock) {
      reading = false;
      endIfDone();
    }
  }

  /** Read no more deliveries; finish the ones already read, then end the call. */
  void drain() {
    synchronized (lock) {
      reading = false;
      endIfDone();
    }
  }

  private void done(Result result) {
    synchronized (lock) {
      inFlight -= 1;
      if (closed) {
        return;
      }
      pending.add(result);
      if (!flushing) {
        flushing = true;
        executor.execute(this::flush);
      }
    }
  }

  private void flush() {
    synchronized (lock) {
      flushing = false;
      write();
      endIfDone();
    }
  }

  private void write() {
    if (closed || pending.isEmpty()) {
      return;
    }
    List<Result> results = pending;
    pending = new ArrayList<>();
    for (O frame : frames.apply(results)) {
      out.onNext(frame);
    }
  }

  private void endIfDone() {
    if (closed || reading || inFlight > 0 || flushing) {
      return;
    }
    write();
    closed = true;
    out.onCompleted();
    onClose.accept(this);
  }

  private void cancelled() {
    synchronized (lock) {
      if (closed) {
        return;
      }
      closed = true;
    }
    onClose.accept(this);
  }
}
