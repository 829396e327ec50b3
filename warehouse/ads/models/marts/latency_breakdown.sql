with

requests as (

    select * from {{ ref('int_model_calls') }}
    where {{ in_build_days('event_date') }}

),

staged_requests as (

    -- The breakdown is only meaningful over requests that log their duration and every stage.
    select
        *,
        duration_ms is not null
            and queue_ms is not null
            and preprocess_ms is not null
            and inference_ms is not null
            and postprocess_ms is not null as is_staged

    from requests

),

stage_stats as (

    select
        event_date,
        model,
        count(*) as requests,
        count(*) filter (where is_staged) as staged_requests,
        {{ exact_mean('queue_ms', 'is_staged') }} as queue_mean_ms,
        quantile_cont(queue_ms, 0.95) filter (where is_staged) as queue_p95_ms,
        {{ exact_mean('preprocess_ms', 'is_staged') }} as preprocess_mean_ms,
        quantile_cont(preprocess_ms, 0.95) filter (where is_staged) as preprocess_p95_ms,
        {{ exact_mean('inference_ms', 'is_staged') }} as inference_mean_ms,
        quantile_cont(inference_ms, 0.95) filter (where is_staged) as inference_p95_ms,
        {{ exact_mean('postprocess_ms', 'is_staged') }} as postprocess_mean_ms,
        quantile_cont(postprocess_ms, 0.95) filter (where is_staged) as postprocess_p95_ms,
        {{ exact_mean('duration_ms - queue_ms - preprocess_ms - inference_ms - postprocess_ms', 'is_staged') }}
            as overhead_mean_ms,
        {{ exact_mean('duration_ms', 'is_staged') }} as duration_mean_ms,
        quantile_cont(duration_ms, 0.95) filter (where is_staged) as duration_p95_ms,
        1 - {{ exact_sum('inference_ms', 'is_staged') }}
            / nullif({{ exact_sum('duration_ms', 'is_staged') }}, 0) as outside_inference_share

    from staged_requests
    group by event_date, model

),

final as (

    select
        *,
        outside_inference_share > {{ var('outside_inference_threshold') }} as is_outside_inference_high

    from stage_stats

)

select * from final
