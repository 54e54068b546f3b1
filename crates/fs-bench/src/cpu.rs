//! [`CpuUse`]: the machine's CPU time over a window, this process's and everyone else's (on
//! one machine, the server's), from `/proc`: to tell a rate the cores limit from one that
//! waits.

/// CPU time read at one moment: the machine's busy time and this process's, in clock ticks.
#[derive(Debug, Clone, Copy)]
pub struct CpuMark {
    busy: u64,
    total: u64,
    own: u64,
}

/// The CPU used between two marks.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuUse {
    /// Milliseconds of CPU this process used (the clients and, in process, the service).
    pub own_ms: f64,
    /// Milliseconds of CPU every other process used (a server on this machine).
    pub others_ms: f64,
    /// The machine's cores' busy share, 0 to 1.
    pub busy: f64,
}

impl CpuMark {
    /// Reads the marks now; `None` where `/proc` cannot tell (not Linux).
    pub fn now() -> Option<CpuMark> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu: Vec<u64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal
        let total: u64 = cpu.iter().take(8).sum();
        let idle = cpu.get(3)? + cpu.get(4)?;
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The fields after the command name, which is in parentheses and may hold spaces.
        let after = own.rsplit_once(')')?.1;
        let fields: Vec<&str> = after.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of the line, 12 and 13 after `) state`.
        let own = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        Some(CpuMark {
            busy: total - idle,
            total,
            own,
        })
    }

    /// The CPU used from this mark to `later`.
    pub fn to(self, later: CpuMark) -> CpuUse {
        // Clock ticks are 100 a second on every Linux this runs on (USER_HZ).
        const MS_PER_TICK: f64 = 10.0;
        let busy = later.busy.saturating_sub(self.busy) as f64;
        let own = later.own.saturating_sub(self.own) as f64;
        CpuUse {
            own_ms: own * MS_PER_TICK,
            others_ms: (busy - own).max(0.0) * MS_PER_TICK,
            busy: busy / later.total.saturating_sub(self.total).max(1) as f64,
        }
    }
}
