"""systemd's watchdog fed while the daemon moves (issue 29): a routine that waits minutes
for a slow Slurm keeps it fed, a daemon that stops moving does not."""

import threading
import time

from ccadapter.runtime.watchdog import Liveness, Watchdog


def test_pings_while_moving_and_stops_when_stuck():
    pings: list[float] = []
    liveness = Liveness()
    dog = Watchdog(lambda: pings.append(time.monotonic()), 0.02, 0.3, liveness).start()
    try:
        until = time.monotonic() + 0.6
        while time.monotonic() < until:  # a routine waiting, its commands ending now and then
            liveness.touch("sacct", 0.1, False)
            time.sleep(0.05)
        moving = len(pings)
        time.sleep(0.6)  # nothing moves any more: stuck
        stuck = len(pings) - moving
    finally:
        dog.stop()
    assert moving >= 15
    assert stuck <= 0.3 / 0.02 + 2  # it stopped within `stall`


def test_a_main_loop_held_by_a_slow_routine_keeps_it_fed():
    """The daemon's main loop, held for a while by one routine whose Slurm commands end
    one after the other (what a Slurm that does not answer looks like: each command runs
    into its timeout): pings go on all the while."""
    from ccadapter.daemon.deliverer import DeliveryStats
    from ccadapter.daemon.loop import Daemon

    class Idle:
        queue = None

        def run_once(self, stopping=lambda: False):
            return DeliveryStats()

    liveness = Liveness()
    daemon = Daemon(Idle(), idle_delivery_wait=0.05, progress=liveness.touch)

    def slow_slurm():
        for _ in range(10):
            time.sleep(0.1)  # a command timing out
            liveness.touch("sacct", 0.1, False)  # the runner's on_command
        daemon.stop()

    daemon.add_routine(slow_slurm, 60, "slurm-window")
    pings: list[float] = []
    dog = Watchdog(lambda: pings.append(time.monotonic()), 0.05, 0.3, liveness).start()
    runner = threading.Thread(target=daemon.run)
    runner.start()
    runner.join(10)
    dog.stop()
    assert not runner.is_alive()
    assert len(pings) >= 15  # fed through the whole second the routine held the loop
