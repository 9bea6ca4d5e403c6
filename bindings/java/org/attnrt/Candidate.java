package org.attnrt;

/** One kernel in an explanation: whether it runs, would run, or why not. */
public final class Candidate {
  /** Kernel name. */
  public final String kernel;
  /** Its priority (higher runs first). */
  public final int priority;
  /** "selected", "eligible", "declined", "disabled", "not-pinned", "unavailable" or "wrong-device". */
  public final String status;
  /** Why it is not eligible ("" for selected and eligible). */
  public final String reason;

  Candidate(String kernel, int priority, String status, String reason) {
    this.kernel = kernel;
    this.priority = priority;
    this.status = status;
    this.reason = reason;
  }

  @Override
  public String toString() {
    return kernel + ": " + status + (reason.isEmpty() ? "" : " — " + reason);
  }
}
