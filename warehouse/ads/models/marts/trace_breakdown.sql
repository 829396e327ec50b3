{#-
    The shapes of the day's multi-call traces (int_trace_steps) and where their time goes. A trace's
    shape is `root: step > step > …`: its root's name, then its other steps' names in start order
    (ties by span id). Per shape: traces, steps per trace (the root not counted), the duration (the root's, else from the
    first start to the last end), the critical path most traces of the shape took (from the root,
    repeatedly the child that ends last, ties by span id; written like a shape), the step most often
    the slowest (the longest non-root step) with its mean share of the duration in those traces, and
    the traces that ran strictly in sequence through more than two steps (each non-root step starts
    at or after the previous one's end) with their tokens and cost.
-#}
with recursive

steps as (

    select * from {{ ref('int_trace_steps') }}

),

sequenced_steps as (

    select
        *,
        started_at >= coalesce(
            lag(ended_at) over (partition by event_date, trace_id order by started_at, span_id),
            started_at
        ) as starts_after_previous

    from steps
    where not is_root

),

slowest_steps as (

    select
        event_date,
        trace_id,
        step_name as slowest_step,
        duration_ms as slowest_step_ms

    from sequenced_steps
    where duration_ms is not null
    qualify row_number() over (
        partition by event_date, trace_id order by duration_ms desc, started_at, span_id
    ) = 1

),

last_ending_children as (

    -- the child of each step that ends last: the next step of a critical path
    select
        event_date,
        trace_id,
        parent_span_id,
        span_id,
        step_name

    from steps
    where not has_no_parent
    qualify row_number() over (
        partition by event_date, trace_id, parent_span_id order by ended_at desc, span_id
    ) = 1

),

critical_walk as (

    select
        event_date,
        trace_id,
        span_id,
        cast(null as varchar) as followers,
        0 as depth

    from steps
    where is_root

    union all

    select
        critical_walk.event_date,
        critical_walk.trace_id,
        last_ending_children.span_id,
        coalesce(critical_walk.followers || ' > ', '') || last_ending_children.step_name,
        critical_walk.depth + 1

    from critical_walk
    inner join last_ending_children
        on critical_walk.event_date = last_ending_children.event_date
        and critical_walk.trace_id = last_ending_children.trace_id
        and critical_walk.span_id = last_ending_children.parent_span_id
    where critical_walk.depth < 1000  -- parent ids that loop end here

),

critical_paths as (

    select
        event_date,
        trace_id,
        arg_max(followers, depth) as critical_followers

    from critical_walk
    group by event_date, trace_id

),

traces as (

    select
        event_date,
        trace_id,
        any_value(step_name) filter (where is_root) as root_name,
        string_agg(step_name, ' > ' order by started_at, span_id) filter (where not is_root) as followers,
        count(*) - 1 as steps,
        coalesce(
            any_value(duration_ms) filter (where is_root),
            (epoch_us(max(ended_at)) - epoch_us(min(started_at))) / 1000
        ) as duration_ms,
        sum(tokens) as tokens,
        sum(cost_usd) as cost_usd

    from steps
    group by event_date, trace_id

),

sequences as (

    select
        event_date,
        trace_id,
        count(*) > 2 and bool_and(starts_after_previous) as is_sequential

    from sequenced_steps
    group by event_date, trace_id

),

described_traces as (

    select
        traces.event_date,
        traces.trace_id,
        traces.root_name || coalesce(': ' || traces.followers, '') as shape,
        traces.steps,
        traces.duration_ms,
        traces.tokens,
        traces.cost_usd,
        traces.root_name || coalesce(': ' || critical_paths.critical_followers, '') as critical_path,
        slowest_steps.slowest_step,
        slowest_steps.slowest_step_ms / nullif(traces.duration_ms, 0) as slowest_step_share,
        coalesce(sequences.is_sequential, false) as is_sequential

    from traces
    inner join critical_paths
        on traces.event_date = critical_paths.event_date
        and traces.trace_id = critical_paths.trace_id
    left join slowest_steps
        on traces.event_date = slowest_steps.event_date
        and traces.trace_id = slowest_steps.trace_id
    left join sequences
        on traces.event_date = sequences.event_date
        and traces.trace_id = sequences.trace_id

),

common_critical_paths as (

    select
        event_date,
        shape,
        critical_path,
        count(*) as critical_path_traces

    from described_traces
    group by event_date, shape, critical_path
    qualify row_number() over (partition by event_date, shape order by count(*) desc, critical_path) = 1

),

common_slowest_steps as (

    select
        event_date,
        shape,
        slowest_step,
        count(*) as slowest_step_traces,
        cast(sum(cast(slowest_step_share as decimal(18, 12))) as double) / count(slowest_step_share)
            as slowest_step_share

    from described_traces
    where slowest_step is not null
    group by event_date, shape, slowest_step
    qualify row_number() over (partition by event_date, shape order by count(*) desc, slowest_step) = 1

),

shapes as (

    select
        event_date,
        shape,
        count(*) as traces,
        sum(steps) / count(*) as steps_per_trace,
        {{ exact_mean('duration_ms') }} as duration_mean_ms,
        quantile_cont(duration_ms, 0.95) as duration_p95_ms,
        count(*) filter (where is_sequential) as sequential_traces,
        cast(coalesce(sum(tokens) filter (where is_sequential), 0) as bigint) as sequential_tokens,
        cast(sum(cost_usd) filter (where is_sequential) as decimal(18, 9)) as sequential_cost_usd

    from described_traces
    group by event_date, shape

),

final as (

    select
        shapes.event_date,
        shapes.shape,
        shapes.traces,
        shapes.steps_per_trace,
        shapes.duration_mean_ms,
        shapes.duration_p95_ms,
        common_critical_paths.critical_path,
        common_critical_paths.critical_path_traces,
        common_slowest_steps.slowest_step,
        common_slowest_steps.slowest_step_traces,
        common_slowest_steps.slowest_step_share,
        shapes.sequential_traces,
        shapes.sequential_tokens,
        shapes.sequential_cost_usd

    from shapes
    inner join common_critical_paths
        on shapes.event_date = common_critical_paths.event_date
        and shapes.shape = common_critical_paths.shape
    left join common_slowest_steps
        on shapes.event_date = common_slowest_steps.event_date
        and shapes.shape = common_slowest_steps.shape

)

select * from final
