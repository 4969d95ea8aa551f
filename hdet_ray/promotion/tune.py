"""The same promotion rules for Ray Tune trials: `PromotionScheduler`, a `TrialScheduler`.

Each trial is one (candidate, seed) cell: its config names the candidate (`candidate_key`) and the seed
(`seed_key`). Trials continue across stages; a stage's `steps` is its budget in `time_attr` units
(`training_iteration` by default). A trial that reaches a stage's budget is paused until every live
trial of that stage has reported (or ended); then `decide_stage` judges the candidates on the reported
numbers, exactly as the runner does, and every trial of a stopped candidate is stopped while the others
resume. At the last stage's budget every trial stops. The stages' `seeds`, `hosts` and `start` are the
runner's business and are not used here; pausing needs a trainable that checkpoints.

    from ray import tune
    from hdet_ray.promotion import Study
    from hdet_ray.promotion.tune import PromotionScheduler

    study = Study.from_file("examples/studies/digits.yaml")
    tuner = tune.Tuner(trainable,
                       param_space={"candidate": tune.grid_search(names), "seed": tune.grid_search([0, 1])},
                       tune_config=tune.TuneConfig(scheduler=PromotionScheduler(study)))
"""

from __future__ import annotations

from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

from hdet_ray.promotion.decisions import StageDecision, decide_stage
from hdet_ray.promotion.protocol import Study
from hdet_ray.promotion.table import Table, cell_key


class PromotionScheduler(TrialScheduler):
    def __init__(
        self,
        study: Study,
        *,
        candidate_key: str = "candidate",
        seed_key: str = "seed",
        time_attr: str = "training_iteration",
    ) -> None:
        super().__init__()
        self._supports_buffered_results = False
        self.study, self.candidate_key, self.seed_key, self.time_attr = (
            study,
            candidate_key,
            seed_key,
            time_attr,
        )
        self._metric, self._mode = study.metric, study.mode
        self._cell: dict[Trial, tuple[str, int]] = {}
        self._stage: dict[Trial, int] = {}
        self._results: dict[int, dict[Trial, float]] = {k: {} for k in range(len(study.stages))}
        self._ended: set[Trial] = set()
        self._unpause: set[Trial] = set()
        self.decisions: list[StageDecision] = []
        """One per decided stage, in order (the record of what the rules did)."""
        self.stopped_after: dict[str, str] = {}
        """trial_id -> the stage after which it was stopped."""

    def set_search_properties(self, metric, mode, **spec) -> bool:
        return metric in (None, self.study.metric) and mode in (None, self.study.mode)

    def on_trial_add(self, tune_controller, trial: Trial) -> None:
        names = [c.name for c in self.study.candidates]
        candidate, seed = trial.config.get(self.candidate_key), trial.config.get(self.seed_key, 0)
        if candidate not in names:
            raise ValueError(
                f"config.{self.candidate_key}: {candidate!r} is not a candidate of study "
                f"{self.study.name!r}; candidates: {names}"
            )
        self._cell[trial] = (candidate, int(seed))
        self._stage[trial] = 0

    def on_trial_result(self, tune_controller, trial: Trial, result: dict) -> str:
        self._unpause.discard(trial)  # it runs again: the next pause waits for the next decision
        k = self._stage[trial]
        if result.get(self.time_attr, 0) < self.study.stages[k].steps or self._metric not in result:
            return TrialScheduler.CONTINUE
        self._results[k][trial] = float(result[self._metric])
        action = self._maybe_decide(tune_controller, k, current=trial)
        return action or TrialScheduler.PAUSE

    def on_trial_error(self, tune_controller, trial: Trial) -> None:
        self._end(tune_controller, trial)

    def on_trial_complete(self, tune_controller, trial: Trial, result: dict) -> None:
        self._end(tune_controller, trial)

    def on_trial_remove(self, tune_controller, trial: Trial) -> None:
        self._end(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller) -> Trial | None:
        for trial in tune_controller.get_trials():
            if trial.status == Trial.PENDING:
                return trial
        for trial in tune_controller.get_trials():
            if trial.status == Trial.PAUSED and trial in self._unpause:
                return trial
        return None

    def debug_string(self) -> str:
        done = ", ".join(f"{d.stage}: {len(d.advanced)} on" for d in self.decisions) or "no stage decided"
        return f"PromotionScheduler(study {self.study.name}): {done}"

    # -- the decision ----------------------------------------------------------------------------------
    def _end(self, tune_controller, trial: Trial) -> None:
        if trial in self._ended:
            return
        self._ended.add(trial)
        self._unpause.discard(trial)
        k = self._stage.get(trial)
        if k is not None and len(self.decisions) == k:
            self._maybe_decide(tune_controller, k, current=None)

    def _maybe_decide(self, tune_controller, k: int, current: Trial | None) -> str | None:
        """Decide stage k once every live trial of it has reported; the current trial's action, if decided."""
        members = [t for t, s in self._stage.items() if s == k]
        if (
            not members
            or any(t not in self._results[k] and t not in self._ended for t in members)
            or len(self.decisions) != k
        ):
            return None
        table: Table = {}
        for t in members:
            candidate, seed = self._cell[t]
            row = table.setdefault(candidate, {})
            if t in self._results[k]:
                row[cell_key(seed)] = self._results[k][t]
        decision = decide_stage(self.study, k, table)
        self.decisions.append(decision)
        final = k == len(self.study.stages) - 1
        action = None
        for t in members:
            go_on = decision.outcomes[self._cell[t][0]].advanced and not final
            if not go_on and not final:
                self.stopped_after[t.trial_id] = decision.stage
            if go_on:
                self._stage[t] = k + 1
            if t is current:
                action = TrialScheduler.CONTINUE if go_on else TrialScheduler.STOP
            elif t in self._ended:
                continue
            elif go_on:
                self._unpause.add(t)
            else:
                tune_controller.stop_trial(t)
        if not final:
            self._maybe_decide(tune_controller, k + 1, current=None)  # every member may have ended already
        return action
