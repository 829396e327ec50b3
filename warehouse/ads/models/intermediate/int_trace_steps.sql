{#-
    The steps of the multi-call traces of the built days: traces with at least two calls carrying
    a span id (a retry chain shares its trace id but has no span ids), each call a step named by its
    operation and each of the trace's dwd.span rows a step named by the span's name. The root is the
    step with no parent in the trace (the first to start, by span id, should several have none); a
    trace across midnight is a trace on each of its days. Steps carry their end, their tokens and cost.
-#}
with

calls as (

    select * from {{ ref('stg_dwd__requests') }}
    where {{ in_build_days('event_date') }}
        and span_id is not null

),

spans as (

    select * from {{ ref('stg_dwd__spans') }}
    where {{ in_build_days('event_date') }}

),

multi_call_traces as (

    select event_date, trace_id
    from calls
    group by event_date, trace_id
    having count(*) >= 2

),

steps as (

    select
        event_date,
        trace_id,
        span_id,
        parent_span_id,
        operation as step_name,
        requested_at as started_at,
        duration_ms,
        coalesce(input_tokens, 0) + coalesce(output_tokens, 0) as tokens,
        cost_usd

    from calls

    union all

    select
        event_date,
        trace_id,
        span_id,
        parent_span_id,
        span_name as step_name,
        started_at,
        duration_ms,
        0 as tokens,
        null as cost_usd

    from spans

),

trace_steps as (

    select
        steps.*,
        steps.started_at + to_microseconds(cast(round(coalesce(steps.duration_ms, 0) * 1000) as bigint)) as ended_at

    from steps
    semi join multi_call_traces
        on steps.event_date = multi_call_traces.event_date
        and steps.trace_id = multi_call_traces.trace_id

),

with_parents as (

    select
        trace_steps.*,
        parents.span_id is null as has_no_parent

    from trace_steps
    left join trace_steps as parents
        on trace_steps.event_date = parents.event_date
        and trace_steps.trace_id = parents.trace_id
        and trace_steps.parent_span_id = parents.span_id

),

final as (

    select
        *,
        row_number() over (
            partition by event_date, trace_id
            order by has_no_parent desc, started_at, span_id
        ) = 1 as is_root

    from with_parents

)

select * from final
