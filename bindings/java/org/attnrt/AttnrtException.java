package org.attnrt;

/**
 * A failing attnrt call: the status code of the C ABI and the library's message, which names the
 * offending input with the expected and the actual value.
 */
public class AttnrtException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final int code;
  private final String detail;

  /**
   * Called by the native layer.
   *
   * @param code an attnrt_status value (never 0)
   * @param detail the library's message for the failing call
   */
  public AttnrtException(int code, String detail) {
    super(Attnrt.statusName(code) + ": " + detail);
    this.code = code;
    this.detail = detail;
  }

  /** The status, e.g. {@link Status#ERROR_INVALID_ARGUMENT}; {@code null} for a code this version does not know. */
  public Status getStatus() {
    for (Status status : Status.values()) {
      if (status.swigValue() == code) {
        return status;
      }
    }
    return null;
  }

  /** The numeric attnrt_status. */
  public int getStatusCode() {
    return code;
  }

  /** The stable status name, e.g. "ATTNRT_ERROR_INVALID_ARGUMENT". */
  public String getStatusName() {
    return Attnrt.statusName(code);
  }

  /** The library's message without the status name. */
  public String getDetail() {
    return detail;
  }
}
