package org.attnrt;

/** A registered kernel, as the runtime ranks it. */
public final class KernelInfo {
  /** "plugin.op.algorithm.isa", e.g. "cpu_x86.gqa.flash.avx2". */
  public final String name;
  /** The plugin that registered it. */
  public final String plugin;
  /** Op name, e.g. "gqa". */
  public final String op;
  /** attnrt_device_type: 1 CPU, 2 CUDA. */
  public final int deviceType;
  /** Higher runs first. */
  public final int priority;

  KernelInfo(String name, String plugin, String op, int deviceType, int priority) {
    this.name = name;
    this.plugin = plugin;
    this.op = op;
    this.deviceType = deviceType;
    this.priority = priority;
  }

  @Override
  public String toString() {
    return name + " (priority " + priority + ")";
  }
}
